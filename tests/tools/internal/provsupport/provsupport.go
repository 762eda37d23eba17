// Package provsupport holds the pieces shared by the TEST STAND-IN provider plugins in this module
// (cmd/pulumi-resource-kubernetes, -random and -standin): serving a gRPC ResourceProvider with
// the Pulumi SDK and the RPCs they answer alike (Base), property (un)marshalling, a structural
// diff that yields Pulumi property paths, and engine-driven cancellation. For tests only; never
// shipped.
package provsupport

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Base answers the RPCs every stand-in answers the same way: plugin info and schema, attach, a
// configuration taken as it is and never changing the provider, and a Cancel with nothing to
// stop. A provider embeds it and overrides what it does differently.
type Base struct {
	pulumirpc.UnimplementedResourceProviderServer
	Version string
	Schema  func() []byte
}

func (b *Base) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: b.Version}, nil
}

func (b *Base) GetSchema(_ context.Context, req *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	if v := req.GetVersion(); v != 0 {
		return nil, fmt.Errorf("unsupported schema version %d", v)
	}
	return &pulumirpc.GetSchemaResponse{Schema: string(b.Schema())}, nil
}

func (b *Base) Attach(context.Context, *pulumirpc.PluginAttach) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (b *Base) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

func (b *Base) CheckConfig(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (b *Base) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

// Serve runs a provider plugin the way the engine expects (prints the port, serves gRPC until
// the engine hangs up) and exits the process on failure.
func Serve(name string, make func(host *provider.HostClient) (pulumirpc.ResourceProviderServer, error)) {
	if err := provider.Main(name, make); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Unmarshal decodes RPC properties, keeping unknowns (previews) and secrets.
func Unmarshal(s *structpb.Struct, label string) (resource.PropertyMap, error) {
	if s == nil {
		return resource.PropertyMap{}, nil
	}
	m, err := plugin.UnmarshalProperties(s, plugin.MarshalOptions{
		Label: label, KeepUnknowns: true, KeepSecrets: true, SkipNulls: true,
	})
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = resource.PropertyMap{}
	}
	return m, nil
}

// Marshal encodes properties for an RPC response, keeping unknowns and secrets.
func Marshal(m resource.PropertyMap, label string) (*structpb.Struct, error) {
	return plugin.MarshalProperties(m, plugin.MarshalOptions{
		Label: label, KeepUnknowns: true, KeepSecrets: true,
	})
}

// Change is one difference between two property trees.
type Change struct {
	Path resource.PropertyPath
	Kind pulumirpc.PropertyDiff_Kind // ADD, DELETE or UPDATE
}

// Key is the property path in Pulumi's textual form (`a.b["c.d"][0]`).
func (c Change) Key() string { return c.Path.String() }

// Top is the top-level property that changed.
func (c Change) Top() string {
	if len(c.Path) == 0 {
		return ""
	}
	s, _ := c.Path[0].(string)
	return s
}

// Under reports whether the change is at or below prefix (a property path).
func (c Change) Under(prefix resource.PropertyPath) bool {
	if len(prefix) > len(c.Path) {
		return false
	}
	for i := range prefix {
		if prefix[i] != c.Path[i] {
			return false
		}
	}
	return true
}

// DiffMaps compares two property maps structurally. Nulls count as absent, secretness is ignored
// (only values matter) and an unknown value on the new side is always a change.
func DiffMaps(olds, news resource.PropertyMap) []Change {
	var out []Change
	diffObjects(nil, olds, news, &out)
	return out
}

func present(v resource.PropertyValue, ok bool) bool { return ok && !v.IsNull() }

// Plain strips secret wrappers from the outside of a value.
func Plain(v resource.PropertyValue) resource.PropertyValue {
	for v.IsSecret() {
		v = v.SecretValue().Element
	}
	if v.IsOutput() {
		o := v.OutputValue()
		if !o.Known {
			return resource.MakeComputed(resource.NewProperty(""))
		}
		return Plain(o.Element)
	}
	return v
}

func diffObjects(path resource.PropertyPath, olds, news resource.PropertyMap, out *[]Change) {
	keys := map[resource.PropertyKey]bool{}
	for k := range olds {
		keys[k] = true
	}
	for k := range news {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, string(k))
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		o, okO := olds[resource.PropertyKey(k)]
		n, okN := news[resource.PropertyKey(k)]
		p := append(append(resource.PropertyPath{}, path...), k)
		switch {
		case !present(o, okO) && !present(n, okN):
		case !present(o, okO):
			*out = append(*out, Change{Path: p, Kind: pulumirpc.PropertyDiff_ADD})
		case !present(n, okN):
			*out = append(*out, Change{Path: p, Kind: pulumirpc.PropertyDiff_DELETE})
		default:
			diffValues(p, o, n, out)
		}
	}
}

func diffValues(path resource.PropertyPath, o, n resource.PropertyValue, out *[]Change) {
	o, n = Plain(o), Plain(n)
	switch {
	case n.IsComputed() || o.IsComputed():
		*out = append(*out, Change{Path: path, Kind: pulumirpc.PropertyDiff_UPDATE})
	case o.IsObject() && n.IsObject():
		diffObjects(path, o.ObjectValue(), n.ObjectValue(), out)
	case o.IsArray() && n.IsArray():
		oa, na := o.ArrayValue(), n.ArrayValue()
		for i := 0; i < len(oa) || i < len(na); i++ {
			p := append(append(resource.PropertyPath{}, path...), i)
			switch {
			case i >= len(oa):
				*out = append(*out, Change{Path: p, Kind: pulumirpc.PropertyDiff_ADD})
			case i >= len(na):
				*out = append(*out, Change{Path: p, Kind: pulumirpc.PropertyDiff_DELETE})
			default:
				diffValues(p, oa[i], na[i], out)
			}
		}
	case !o.DeepEquals(n):
		*out = append(*out, Change{Path: path, Kind: pulumirpc.PropertyDiff_UPDATE})
	}
}

// FilterIgnored drops the changes at or below any of the ignoreChanges paths.
func FilterIgnored(changes []Change, ignore []string) []Change {
	if len(ignore) == 0 {
		return changes
	}
	var paths []resource.PropertyPath
	for _, s := range ignore {
		if p, err := resource.ParsePropertyPath(s); err == nil {
			paths = append(paths, p)
		}
	}
	var out []Change
next:
	for _, c := range changes {
		for _, p := range paths {
			if c.Under(p) {
				continue next
			}
		}
		out = append(out, c)
	}
	return out
}

// ReplaceKind turns an ADD/DELETE/UPDATE kind into its *_REPLACE variant.
func ReplaceKind(k pulumirpc.PropertyDiff_Kind) pulumirpc.PropertyDiff_Kind {
	switch k {
	case pulumirpc.PropertyDiff_ADD:
		return pulumirpc.PropertyDiff_ADD_REPLACE
	case pulumirpc.PropertyDiff_DELETE:
		return pulumirpc.PropertyDiff_DELETE_REPLACE
	case pulumirpc.PropertyDiff_UPDATE:
		return pulumirpc.PropertyDiff_UPDATE_REPLACE
	}
	return k
}

// DiffResponse builds a DiffResponse from changes; replace decides which changes force a
// replacement.
func DiffResponse(changes []Change, replace func(Change) bool, deleteBeforeReplace bool) *pulumirpc.DiffResponse {
	resp := &pulumirpc.DiffResponse{
		Changes:         pulumirpc.DiffResponse_DIFF_NONE,
		DetailedDiff:    map[string]*pulumirpc.PropertyDiff{},
		HasDetailedDiff: true,
	}
	diffs, replaces := map[string]bool{}, map[string]bool{}
	for _, c := range changes {
		kind := c.Kind
		if replace != nil && replace(c) {
			kind = ReplaceKind(kind)
			replaces[c.Top()] = true
		}
		resp.DetailedDiff[c.Key()] = &pulumirpc.PropertyDiff{Kind: kind, InputDiff: true}
		diffs[c.Top()] = true
	}
	if len(changes) > 0 {
		resp.Changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	resp.Diffs = sortedKeys(diffs)
	resp.Replaces = sortedKeys(replaces)
	resp.DeleteBeforeReplace = deleteBeforeReplace && len(replaces) > 0
	return resp
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Canceller records the engine's Cancel RPC: after it, every context from Context is done.
type Canceller struct {
	once sync.Once
	ch   chan struct{}
	mu   sync.Mutex
}

func (c *Canceller) done() chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Cancel signals cancellation (idempotent).
func (c *Canceller) Cancel() { c.once.Do(func() { close(c.done()) }) }

// Done is closed once Cancel has been called.
func (c *Canceller) Done() <-chan struct{} { return c.done() }

// Context derives a context that is also cancelled by Cancel.
func (c *Canceller) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	done := c.done()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
