// Package standin implements the `standin` TEST STAND-IN provider plugin (pulumi-resource-standin):
// the resource types the project's tests use to drive the real Pulumi engine without any cloud.
// For tests only; never shipped.
//
//   - standin:index:Record  any of a fixed set of loosely typed properties; outputs = inputs; every
//     change is an in-place update.
//   - standin:index:Fail    `message`, `phase` (create|update|delete|always): that step fails with
//     the message.
//   - standin:index:Sleep   `seconds` or `createDuration`, `deleteSeconds` or `destroyDuration`,
//     `abortOnCancel`, `triggers` (replace on change): sleeps during create and delete. When the
//     engine cancels (Cancel RPC or a cancelled request) the in-flight sleep finishes, unless
//     `abortOnCancel: true`, which fails it with `context canceled`.
package standin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
)

// Version is the plugin version reported to the engine (and in the schema).
const Version = "1.0.0"

const (
	RecordType = "standin:index:Record"
	FailType   = "standin:index:Fail"
	SleepType  = "standin:index:Sleep"

	// DefaultFailMessage is what a Fail resource without `message` fails with.
	DefaultFailMessage = "standin:index:Fail failed as requested"
)

// RecordProperties are the properties a Record accepts. pulumi-language-yaml type-checks resource
// properties against the schema and a schema cannot declare "any property", so Record declares
// a fixed set of loosely typed (Any) optional properties: every name the tests use, plus common
// ones.
var RecordProperties = []string{
	"a", "b", "c", "config", "content", "count", "data", "dbPassword", "description", "enabled",
	"first", "fromMap", "greeting", "input", "items", "json", "key", "labels", "list", "map",
	"message", "name", "number", "output", "password", "plain", "region", "replicas", "result",
	"secret", "settings", "tags", "text", "token", "triggers", "user", "v", "value", "values",
	"x", "y", "z",
}

// Schema returns the package schema (JSON).
func Schema() []byte {
	anyProp := map[string]any{"$ref": "pulumi.json#/Any"}
	record := map[string]any{}
	for _, name := range RecordProperties {
		record[name] = anyProp
	}
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	num := func(desc string) map[string]any { return map[string]any{"type": "number", "description": desc} }
	fail := map[string]any{
		"message": str("The error the failing step reports (default: `" + DefaultFailMessage + "`)."),
		"phase":   str("Which step fails: create (default), update, delete or always."),
	}
	sleep := map[string]any{
		"seconds":         num("Seconds to sleep during create."),
		"createDuration":  str("Go duration to sleep during create (`30s`, `1m30s`, `500ms`)."),
		"deleteSeconds":   num("Seconds to sleep during delete."),
		"destroyDuration": str("Go duration to sleep during delete."),
		"abortOnCancel": map[string]any{"type": "boolean",
			"description": "Fail the in-flight sleep with `context canceled` when the engine cancels."},
		"triggers": map[string]any{"type": "object", "additionalProperties": anyProp,
			"description": "Arbitrary values; any change replaces the resource."},
	}
	res := func(desc string, props map[string]any) map[string]any {
		return map[string]any{"description": desc, "inputProperties": props, "properties": props}
	}
	spec := map[string]any{
		"name":        "standin",
		"displayName": "standin (test stand-in)",
		"version":     Version,
		"description": "TEST STAND-IN resource types for the pulumi-operator-rs tests. Never shipped.",
		"meta":        map[string]any{"moduleFormat": "(.*)"},
		"resources": map[string]any{
			RecordType: res("Stores its inputs as outputs.", record),
			FailType:   res("Fails the step named by `phase`.", fail),
			SleepType:  res("Sleeps during create and delete.", sleep),
		},
	}
	b, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return b
}

// Provider is the gRPC ResourceProvider.
type Provider struct {
	provsupport.Base
	cancel provsupport.Canceller
}

// New makes the provider (the host client is not needed).
func New(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
	return &Provider{Base: provsupport.Base{Version: Version, Schema: Schema}}, nil
}

func (p *Provider) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	p.cancel.Cancel()
	return &emptypb.Empty{}, nil
}

func (p *Provider) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	// Secrets are accepted so that Record hands them back exactly where they were. Previews do
	// not call Create/Update (the engine uses the inputs), so nothing sleeps or fails in a preview.
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true}, nil
}

func typeOf(urn, typ string) string {
	if typ != "" {
		return typ
	}
	if u, err := resource.ParseURN(urn); err == nil {
		return string(u.Type())
	}
	return ""
}

func known(t string) error {
	switch t {
	case RecordType, FailType, SleepType:
		return nil
	}
	return fmt.Errorf("unknown resource type %q (the standin provider knows %s, %s and %s)",
		t, RecordType, FailType, SleepType)
}

func (p *Provider) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	t := typeOf(req.GetUrn(), req.GetType())
	if err := known(t); err != nil {
		return nil, err
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	var failures []*pulumirpc.CheckFailure
	fail := func(prop, reason string) {
		failures = append(failures, &pulumirpc.CheckFailure{Property: prop, Reason: reason})
	}
	switch t {
	case FailType:
		if ph, ok := str(news, "phase"); ok {
			switch ph {
			case "", "create", "update", "delete", "always":
			default:
				fail("phase", fmt.Sprintf("phase must be create, update, delete or always, not %q", ph))
			}
		}
	case SleepType:
		for _, k := range []string{"seconds", "deleteSeconds"} {
			if v, ok := get(news, k); ok && !v.IsComputed() {
				if !v.IsNumber() || v.NumberValue() < 0 || math.IsNaN(v.NumberValue()) {
					fail(k, k+" must be a non-negative number")
				}
			}
		}
		for _, k := range []string{"createDuration", "destroyDuration"} {
			if s, ok := str(news, k); ok && s != "" {
				if d, err := time.ParseDuration(s); err != nil || d < 0 {
					fail(k, fmt.Sprintf("%s must be a Go duration such as 30s or 1m30s, not %q", k, s))
				}
			}
		}
	}
	return &pulumirpc.CheckResponse{Inputs: req.GetNews(), Failures: failures}, nil
}

func (p *Provider) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	t := typeOf(req.GetUrn(), req.GetType())
	olds := req.GetOldInputs()
	if olds == nil {
		olds = req.GetOlds()
	}
	o, err := provsupport.Unmarshal(olds, "olds")
	if err != nil {
		return nil, err
	}
	n, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	changes := provsupport.FilterIgnored(provsupport.DiffMaps(o, n), req.GetIgnoreChanges())
	return provsupport.DiffResponse(changes, func(c provsupport.Change) bool {
		return t == SleepType && c.Top() == "triggers"
	}, false), nil
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (p *Provider) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	t := typeOf(req.GetUrn(), req.GetType())
	if err := known(t); err != nil {
		return nil, err
	}
	props, err := provsupport.Unmarshal(req.GetProperties(), "properties")
	if err != nil {
		return nil, err
	}
	switch t {
	case FailType:
		if err := failIn(props, "create"); err != nil {
			return nil, err
		}
	case SleepType:
		if err := p.sleep(ctx, props, "seconds", "createDuration"); err != nil {
			return nil, err
		}
	}
	return &pulumirpc.CreateResponse{Id: newID(), Properties: req.GetProperties()}, nil
}

func (p *Provider) Read(_ context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	// There is nothing outside the state to drift from: read the state back as it is.
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: req.GetProperties(), Inputs: req.GetInputs()}, nil
}

func (p *Provider) Update(_ context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	t := typeOf(req.GetUrn(), req.GetType())
	if t == FailType {
		props, err := provsupport.Unmarshal(req.GetNews(), "news")
		if err != nil {
			return nil, err
		}
		if err := failIn(props, "update"); err != nil {
			return nil, err
		}
	}
	return &pulumirpc.UpdateResponse{Properties: req.GetNews()}, nil
}

func (p *Provider) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	t := typeOf(req.GetUrn(), req.GetType())
	state := req.GetOldInputs()
	if state == nil {
		state = req.GetProperties()
	}
	props, err := provsupport.Unmarshal(state, "properties")
	if err != nil {
		return nil, err
	}
	switch t {
	case FailType:
		if err := failIn(props, "delete"); err != nil {
			return nil, err
		}
	case SleepType:
		if err := p.sleep(ctx, props, "deleteSeconds", "destroyDuration"); err != nil {
			return nil, err
		}
	}
	return &emptypb.Empty{}, nil
}

// failIn returns the Fail resource's error when phase (create|update|delete) is its phase.
func failIn(props resource.PropertyMap, phase string) error {
	want, _ := str(props, "phase")
	if want == "" {
		want = "create"
	}
	if want != phase && want != "always" {
		return nil
	}
	msg, _ := str(props, "message")
	if msg == "" {
		msg = DefaultFailMessage
	}
	return errors.New(msg)
}

// Duration reads a sleep duration from a number-of-seconds or a Go-duration property.
func Duration(props resource.PropertyMap, secondsKey, durationKey string) (time.Duration, error) {
	if v, ok := get(props, secondsKey); ok && v.IsNumber() {
		return time.Duration(v.NumberValue() * float64(time.Second)), nil
	}
	if s, ok := str(props, durationKey); ok && s != "" {
		return time.ParseDuration(s)
	}
	return 0, nil
}

func (p *Provider) sleep(ctx context.Context, props resource.PropertyMap, secondsKey, durationKey string) error {
	d, err := Duration(props, secondsKey, durationKey)
	if err != nil {
		return err
	}
	abort := false
	if v, ok := get(props, "abortOnCancel"); ok && v.IsBool() {
		abort = v.BoolValue()
	}
	return SleepFor(ctx, p.cancel.Done(), d, abort)
}

// SleepFor sleeps d. If cancelled (ctx done or cancel closed) it returns `context canceled` when
// abort is set and otherwise finishes the sleep.
func SleepFor(ctx context.Context, cancel <-chan struct{}, d time.Duration, abort bool) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-cancel:
	case <-ctx.Done():
	}
	if abort {
		return context.Canceled
	}
	<-timer.C
	return nil
}

func get(m resource.PropertyMap, k string) (resource.PropertyValue, bool) {
	v, ok := m[resource.PropertyKey(k)]
	if !ok || v.IsNull() {
		return v, false
	}
	return provsupport.Plain(v), true
}

func str(m resource.PropertyMap, k string) (string, bool) {
	v, ok := get(m, k)
	if !ok || !v.IsString() {
		return "", false
	}
	return v.StringValue(), true
}
