package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
)

const (
	requestTimeout        = 30 * time.Second // one API request
	defaultDeleteWait     = 2 * time.Minute  // waiting for an object to disappear
	defaultNamespaceWait  = 5 * time.Minute  // waiting for a Namespace to disappear
	createRetries         = 4                // NotFound on create (e.g. its namespace is not there yet)
	createRetryFirstDelay = 500 * time.Millisecond
)

// Provider is the gRPC ResourceProvider.
type Provider struct {
	provsupport.Base
	cancel provsupport.Canceller

	mu               sync.Mutex
	configured       bool
	client           dynamic.Interface
	clientErr        error
	defaultNamespace string
	diffOptions      DiffOptions
}

// New makes the provider (the host client is not needed).
func New(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
	return &Provider{Base: provsupport.Base{Version: Version, Schema: Schema}}, nil
}

func (p *Provider) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	p.cancel.Cancel()
	return &emptypb.Empty{}, nil
}

func (p *Provider) DiffConfig(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds, err := provsupport.Unmarshal(req.GetOldInputs(), "olds")
	if err != nil {
		return nil, err
	}
	if len(olds) == 0 {
		if olds, err = provsupport.Unmarshal(req.GetOlds(), "olds"); err != nil {
			return nil, err
		}
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	// Configuration changes (another kubeconfig, namespace, ...) update the provider in place;
	// resources see the effects through their own diffs (e.g. a new default namespace).
	delete(olds, "version")
	delete(news, "version")
	return provsupport.DiffResponse(provsupport.DiffMaps(olds, news), nil, false), nil
}

type config map[string]string

func (c config) bool(key, env string) bool {
	if v, ok := c[key]; ok {
		return v == "true"
	}
	return os.Getenv(env) == "true"
}

// readConfig reads the provider configuration from Configure's args (or its legacy variables).
func readConfig(req *pulumirpc.ConfigureRequest) (config, error) {
	c := config{}
	if req.GetArgs() != nil {
		args, err := provsupport.Unmarshal(req.GetArgs(), "args")
		if err != nil {
			return nil, err
		}
		for k, v := range args {
			v = provsupport.Plain(v)
			switch {
			case v.IsString():
				c[string(k)] = v.StringValue()
			case v.IsBool():
				c[string(k)] = fmt.Sprint(v.BoolValue())
			case v.IsNumber():
				c[string(k)] = fmt.Sprint(v.NumberValue())
			case v.IsObject() || v.IsArray():
				b, _ := json.Marshal(v.Mappable())
				c[string(k)] = string(b)
			}
		}
		return c, nil
	}
	for k, v := range req.GetVariables() {
		c[strings.TrimPrefix(k, "kubernetes:config:")] = v
	}
	return c, nil
}

func expandHome(path string) string {
	if path == "~" || strings.HasPrefix(path, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, strings.TrimPrefix(path, "~"))
		}
	}
	return path
}

// ClientConfig resolves the cluster configuration like the real provider: the `kubeconfig`
// setting (file contents or a path), else client-go's default loading rules ($KUBECONFIG, then
// ~/.kube/config), which fall back to the in-cluster service account (KUBERNETES_SERVICE_HOST and
// /var/run/secrets/kubernetes.io/serviceaccount) when no kubeconfig is found. `context` and
// `cluster` select within the kubeconfig; the default namespace is the `namespace` setting, else
// the context's namespace (the pod's namespace in-cluster), else "default".
func ClientConfig(c config) (clientcmd.ClientConfig, error) {
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c["context"]}
	overrides.Context.Cluster = c["cluster"]
	overrides.Context.Namespace = c["namespace"]
	kc := strings.TrimSpace(c["kubeconfig"])
	if kc == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides), nil
	}
	if !strings.Contains(kc, "\n") && !strings.HasPrefix(kc, "{") {
		path := expandHome(kc)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("failed to read kubeconfig file %q: %w", path, err)
		}
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides), nil
	}
	api, err := clientcmd.Load([]byte(kc))
	if err != nil {
		return nil, fmt.Errorf("failed to parse kubeconfig data in `kubernetes:config:kubeconfig`: %w", err)
	}
	return clientcmd.NewNonInteractiveClientConfig(*api, c["context"], overrides, nil), nil
}

func (p *Provider) Configure(_ context.Context, req *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	c, err := readConfig(req)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.configured = true
	p.diffOptions = DiffOptions{
		ConfigMapMutable: c.bool("enableConfigMapMutable", "PULUMI_K8S_ENABLE_CONFIGMAP_MUTABLE"),
		SecretMutable:    c.bool("enableSecretMutable", "PULUMI_K8S_ENABLE_SECRET_MUTABLE"),
	}
	p.defaultNamespace = c["namespace"]
	// An unusable configuration does not fail Configure (as in the real provider); operations
	// that need the cluster report it.
	p.client, p.clientErr = nil, nil
	cc, err := ClientConfig(c)
	if err != nil {
		p.clientErr = err
		return p.configureResponse(), nil
	}
	if ns, _, err := cc.Namespace(); err == nil && p.defaultNamespace == "" {
		p.defaultNamespace = ns
	}
	if p.defaultNamespace == "" {
		p.defaultNamespace = "default"
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		p.clientErr = fmt.Errorf("unable to load Kubernetes client configuration (kubeconfig, $KUBECONFIG, "+
			"~/.kube/config or in-cluster): %w", err)
		return p.configureResponse(), nil
	}
	rc = rest.CopyConfig(rc)
	rc.Timeout = requestTimeout
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "pulumi-resource-kubernetes (test stand-in)"
	p.client, p.clientErr = dynamic.NewForConfig(rc)
	return p.configureResponse(), nil
}

func (p *Provider) configureResponse() *pulumirpc.ConfigureResponse {
	// Secrets are stripped by the engine and put back on the outputs of secret inputs; previews
	// use the inputs (no dry-run requests).
	return &pulumirpc.ConfigureResponse{SupportsAutonamingConfiguration: true}
}

type settings struct {
	client           dynamic.Interface
	clientErr        error
	defaultNamespace string
	diffOptions      DiffOptions
}

func (p *Provider) settings() settings {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.configured {
		return settings{clientErr: errors.New("the kubernetes provider is not configured")}
	}
	return settings{p.client, p.clientErr, p.defaultNamespace, p.diffOptions}
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

func nameOf(urn, name string) string {
	if name != "" {
		return name
	}
	if u, err := resource.ParseURN(urn); err == nil {
		return u.Name()
	}
	return ""
}

func (p *Provider) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	k, err := KindForToken(typeOf(req.GetUrn(), req.GetType()))
	if err != nil {
		return nil, err
	}
	olds, err := provsupport.Unmarshal(req.GetOlds(), "olds")
	if err != nil {
		return nil, err
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	ns := p.settings().defaultNamespace
	checked, failures, err := CheckInputs(CheckRequest{
		Kind: k, LogicalName: nameOf(req.GetUrn(), req.GetName()), Olds: olds, News: news,
		DefaultNamespace: ns, RandomSeed: req.GetRandomSeed(), Autonaming: req.GetAutonaming(),
	})
	if err != nil {
		return nil, err
	}
	inputs, err := provsupport.Marshal(checked, "inputs")
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CheckResponse{Inputs: inputs, Failures: failures}, nil
}

func (p *Provider) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	k, err := KindForToken(typeOf(req.GetUrn(), req.GetType()))
	if err != nil {
		return nil, err
	}
	oldOutputs, err := provsupport.Unmarshal(req.GetOlds(), "olds")
	if err != nil {
		return nil, err
	}
	oldInputs, err := provsupport.Unmarshal(req.GetOldInputs(), "oldInputs")
	if err != nil {
		return nil, err
	}
	if len(oldInputs) == 0 {
		oldInputs = oldOutputs
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	opts := p.settings().diffOptions
	return Diff(DiffRequest{Kind: k, OldInputs: oldInputs, OldOutputs: oldOutputs, News: news,
		IgnoreChanges: req.GetIgnoreChanges(), Options: opts}), nil
}

// op derives a bounded context that the engine's Cancel also ends.
func (p *Provider) op(ctx context.Context, timeoutSeconds float64, def time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancelOnEngine := p.cancel.Context(ctx)
	d := def
	if timeoutSeconds > 0 {
		d = time.Duration(timeoutSeconds * float64(time.Second))
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, d)
	return ctx, func() { cancelTimeout(); cancelOnEngine() }
}

func (p *Provider) resourceClient(k Kind, namespace string) (dynamic.ResourceInterface, error) {
	s := p.settings()
	if s.clientErr != nil {
		return nil, s.clientErr
	}
	ri := s.client.Resource(k.GVR())
	if k.Namespaced {
		return ri.Namespace(namespace), nil
	}
	return ri, nil
}

// apiMessage is the API server's message, verbatim.
func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return formatStatus(se.Status())
	}
	return err.Error()
}

// formatStatus gives a rejection with several causes one line per cause, in the "N errors
// occurred:" form the real provider uses for multiple errors (hashicorp/go-multierror).
func formatStatus(st metav1.Status) string {
	if st.Details == nil || len(st.Details.Causes) < 2 {
		return st.Message
	}
	head := st.Message
	if i := strings.Index(head, " is invalid: "); i >= 0 {
		head = head[:i+len(" is invalid")]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d errors occurred:", head, len(st.Details.Causes))
	for _, c := range st.Details.Causes {
		b.WriteString("\n\t* ")
		if c.Field != "" {
			b.WriteString(c.Field + ": ")
		}
		b.WriteString(c.Message)
	}
	return b.String()
}

func marshalOutputs(k Kind, live map[string]any) (*structpb.Struct, error) {
	return provsupport.Marshal(Outputs(k, live), "outputs")
}

func (p *Provider) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	urn := req.GetUrn()
	k, err := KindForToken(typeOf(urn, req.GetType()))
	if err != nil {
		return nil, err
	}
	props, err := provsupport.Unmarshal(req.GetProperties(), "properties")
	if err != nil {
		return nil, err
	}
	if req.GetPreview() {
		return &pulumirpc.CreateResponse{Properties: req.GetProperties()}, nil
	}
	obj, err := ToPlainMap(props)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(k.APIVersion())
	u.SetKind(k.Kind)
	defaultNS := p.settings().defaultNamespace
	if k.Namespaced && u.GetNamespace() == "" {
		u.SetNamespace(defaultNS)
	}
	if !k.Namespaced {
		u.SetNamespace("")
	}
	ri, err := p.resourceClient(k, u.GetNamespace())
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.op(ctx, req.GetTimeout(), 5*time.Minute)
	defer cancel()
	var created *unstructured.Unstructured
	delay := createRetryFirstDelay
	for attempt := 0; ; attempt++ {
		created, err = ri.Create(ctx, u, metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil || !apierrors.IsNotFound(err) || attempt >= createRetries {
			break
		}
		select {
		case <-time.After(delay):
			delay *= 2
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		msg := apiMessage(err)
		if apierrors.IsAlreadyExists(err) {
			msg += "\n\nThe resource already exists in the cluster. This can happen when:\n\n" +
				"  - Renaming a Pulumi resource: use an alias to preserve the identity,\n" +
				"    or use deleteBeforeReplace if the resource needs replacement.\n" +
				"  - Managing an existing resource: use a Patch resource (e.g. NamespacePatch)\n" +
				"    to manage specific fields without owning the resource lifecycle.\n" +
				"  - Adopting a resource into Pulumi: use `pulumi import`. Note that\n" +
				"    protected resources (e.g. kube-system) cannot be deleted on destroy.\n" +
				"  - Intentional upsert: set upsertExistingObjects on the provider to allow\n" +
				"    server-side apply to update existing objects on create."
		}
		return nil, fmt.Errorf("resource %q was not successfully created by the Kubernetes API server: %s", urn, msg)
	}
	outs, err := marshalOutputs(k, created.Object)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: ID(created.GetNamespace(), created.GetName()), Properties: outs}, nil
}

func (p *Provider) Read(ctx context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	k, err := KindForToken(typeOf(req.GetUrn(), req.GetType()))
	if err != nil {
		return nil, err
	}
	ns, name := ParseID(req.GetId())
	if name == "" {
		return nil, fmt.Errorf("failed to read resource because of a failure to parse resource name from request ID: %s",
			req.GetId())
	}
	if k.Namespaced && ns == "" {
		ns = p.settings().defaultNamespace
	}
	ri, err := p.resourceClient(k, ns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.op(ctx, 0, time.Minute)
	defer cancel()
	live, err := ri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &pulumirpc.ReadResponse{}, nil // gone: the engine drops it from the state
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read resource %q: %s", req.GetUrn(), apiMessage(err))
	}
	oldInputs, err := provsupport.Unmarshal(req.GetInputs(), "inputs")
	if err != nil {
		return nil, err
	}
	oldPlain, err := ToPlainMap(oldInputs)
	if err != nil {
		return nil, err
	}
	outs, err := marshalOutputs(k, live.Object)
	if err != nil {
		return nil, err
	}
	ins, err := provsupport.Marshal(FromPlain(InputsFromLive(k, oldPlain, live.Object)), "inputs")
	if err != nil {
		return nil, err
	}
	return &pulumirpc.ReadResponse{Id: ID(live.GetNamespace(), live.GetName()), Properties: outs, Inputs: ins}, nil
}

func (p *Provider) Update(ctx context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	urn := req.GetUrn()
	k, err := KindForToken(typeOf(urn, req.GetType()))
	if err != nil {
		return nil, err
	}
	if req.GetPreview() {
		return &pulumirpc.UpdateResponse{Properties: req.GetNews()}, nil
	}
	oldInputs, err := provsupport.Unmarshal(req.GetOldInputs(), "oldInputs")
	if err != nil {
		return nil, err
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	oldPlain, err := ToPlainMap(oldInputs)
	if err != nil {
		return nil, err
	}
	newPlain, err := ToPlainMap(news)
	if err != nil {
		return nil, err
	}
	ns, name := ParseID(req.GetId())
	ri, err := p.resourceClient(k, ns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := p.op(ctx, req.GetTimeout(), 5*time.Minute)
	defer cancel()
	var live *unstructured.Unstructured
	patch := MergePatch(oldPlain, newPlain)
	if len(patch) == 0 {
		live, err = ri.Get(ctx, name, metav1.GetOptions{})
	} else {
		body, jerr := json.Marshal(patch)
		if jerr != nil {
			return nil, jerr
		}
		live, err = ri.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return nil, fmt.Errorf("update of resource %q failed: %s", urn, apiMessage(err))
	}
	outs, err := marshalOutputs(k, live.Object)
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: outs}, nil
}

func (p *Provider) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	urn := req.GetUrn()
	k, err := KindForToken(typeOf(urn, req.GetType()))
	if err != nil {
		return nil, err
	}
	ns, name := ParseID(req.GetId())
	ri, err := p.resourceClient(k, ns)
	if err != nil {
		return nil, err
	}
	wait := defaultDeleteWait
	if k.Group == "" && k.Kind == "Namespace" {
		wait = defaultNamespaceWait
	}
	ctx, cancel := p.op(ctx, req.GetTimeout(), wait)
	defer cancel()
	background := metav1.DeletePropagationBackground
	err = ri.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background})
	switch {
	case err == nil, apierrors.IsNotFound(err):
	case apierrors.IsConflict(err) && k.Kind == "Namespace":
		// Already terminating: wait for it below.
	default:
		return nil, fmt.Errorf("deletion of resource %q failed: %s", urn, apiMessage(err))
	}
	// Wait until the object is gone (finalizers, namespace termination), bounded by the timeout.
	for {
		_, err := ri.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return &emptypb.Empty{}, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("timed out waiting for the deletion of resource %q (%s %s) to complete: %w",
				urn, k.Kind, req.GetId(), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
