package kubernetes

// The pure parts of the provider (no cluster access): input checking and auto-naming, the diff
// and replacement decisions, cleaning live objects into outputs, and deriving inputs from a live
// object on refresh. They follow pulumi-kubernetes v4 (provider/pkg/provider/provider.go, diff.go
// and pkg/metadata/naming.go).

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"

	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
)

const (
	// AnnotationAutonamed marks objects whose name the provider generated (as the real provider does).
	AnnotationAutonamed = "pulumi.com/autonamed"
	// FieldManager is the field manager of the provider's writes.
	FieldManager = "pulumi-kubernetes"
)

// ErrUnknown is returned when a value needed for an API call is not known yet (previews).
var ErrUnknown = errors.New("value is not known yet")

// ToPlain turns a property value into a JSON-like Go value for the Kubernetes API: secrets are
// unwrapped, nulls inside objects dropped and integral numbers become int64.
func ToPlain(v resource.PropertyValue) (any, error) {
	v = provsupport.Plain(v)
	switch {
	case v.IsNull():
		return nil, nil
	case v.IsBool():
		return v.BoolValue(), nil
	case v.IsNumber():
		f := v.NumberValue()
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f), nil
		}
		return f, nil
	case v.IsString():
		return v.StringValue(), nil
	case v.IsArray():
		out := make([]any, 0, len(v.ArrayValue()))
		for _, e := range v.ArrayValue() {
			p, err := ToPlain(e)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	case v.IsObject():
		return ToPlainMap(v.ObjectValue())
	case v.IsComputed():
		return nil, ErrUnknown
	case v.IsResourceReference():
		return string(v.ResourceReferenceValue().URN), nil
	}
	return nil, fmt.Errorf("unsupported property value %v", v.TypeString())
}

// ToPlainMap is ToPlain for a property map.
func ToPlainMap(m resource.PropertyMap) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range m {
		if v.IsNull() {
			continue
		}
		p, err := ToPlain(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[string(k)] = p
	}
	return out, nil
}

// FromPlain turns a JSON-like object (e.g. from the API server) into a property map.
func FromPlain(m map[string]any) resource.PropertyMap { return resource.NewPropertyMapFromMap(m) }

func obj(m resource.PropertyMap, key string) (resource.PropertyMap, bool) {
	v, ok := m[resource.PropertyKey(key)]
	if !ok {
		return nil, false
	}
	v = provsupport.Plain(v)
	if !v.IsObject() {
		return nil, false
	}
	return v.ObjectValue(), true
}

func strVal(m resource.PropertyMap, key string) (string, bool) {
	v, ok := m[resource.PropertyKey(key)]
	if !ok {
		return "", false
	}
	v = provsupport.Plain(v)
	if !v.IsString() {
		return "", false
	}
	return v.StringValue(), true
}

func isComputed(m resource.PropertyMap, key string) bool {
	v, ok := m[resource.PropertyKey(key)]
	return ok && provsupport.Plain(v).IsComputed()
}

// MetaString reads metadata.<key> from inputs or outputs.
func MetaString(m resource.PropertyMap, key string) string {
	md, ok := obj(m, "metadata")
	if !ok {
		return ""
	}
	s, _ := strVal(md, key)
	return s
}

// IsAutonamed reports whether the object carries the `pulumi.com/autonamed: "true"` annotation.
func IsAutonamed(m resource.PropertyMap) bool {
	md, ok := obj(m, "metadata")
	if !ok {
		return false
	}
	ann, ok := obj(md, "annotations")
	if !ok {
		return false
	}
	s, _ := strVal(ann, AnnotationAutonamed)
	return s == "true"
}

// AutoName is the name the provider generates: `<logical name>-<8 random [0-9a-f]>`,
// deterministic for a given engine random seed (like the real provider).
func AutoName(logicalName string, randomSeed []byte) string {
	n, err := resource.NewUniqueName(randomSeed, logicalName+"-", 8, 0, nil)
	if err != nil {
		panic(err)
	}
	return n
}

// CheckRequest is what Check needs.
type CheckRequest struct {
	Kind             Kind
	LogicalName      string
	Olds, News       resource.PropertyMap
	DefaultNamespace string // "" when unknown
	RandomSeed       []byte
	Autonaming       *pulumirpc.CheckRequest_AutonamingOptions
}

// CheckInputs validates and completes inputs: apiVersion/kind from the token, the name (adopted
// from an auto-named old object, else generated when there is no old object), the
// `pulumi.com/autonamed` annotation, and the default namespace for namespaced kinds.
func CheckInputs(r CheckRequest) (resource.PropertyMap, []*pulumirpc.CheckFailure, error) {
	news := r.News.Copy()
	var failures []*pulumirpc.CheckFailure
	for key, want := range map[string]string{"apiVersion": r.Kind.APIVersion(), "kind": r.Kind.Kind} {
		if isComputed(news, key) {
			continue
		}
		got, ok := strVal(news, key)
		switch {
		case !ok:
			news[resource.PropertyKey(key)] = resource.NewProperty(want)
		case got != want:
			failures = append(failures, &pulumirpc.CheckFailure{Property: key,
				Reason: fmt.Sprintf("%s must be %q for %s, not %q", key, want, r.Kind.Token(), got)})
		}
	}
	if isComputed(news, "metadata") {
		return news, failures, nil
	}
	md, ok := obj(news, "metadata")
	if !ok {
		md = resource.PropertyMap{}
	} else {
		md = md.Copy()
	}
	named := func(m resource.PropertyMap) bool {
		if isComputed(m, "name") {
			return true
		}
		s, _ := strVal(m, "name")
		return s != ""
	}
	setAutonamed := func() error {
		if isComputed(md, "annotations") {
			return nil
		}
		ann, ok := obj(md, "annotations")
		if !ok {
			ann = resource.PropertyMap{}
		} else {
			ann = ann.Copy()
		}
		ann[AnnotationAutonamed] = resource.NewProperty("true")
		md["annotations"] = resource.NewProperty(ann)
		return nil
	}
	generateName, _ := strVal(md, "generateName")
	if !named(md) && generateName == "" && !isComputed(md, "generateName") {
		if len(r.Olds) > 0 {
			// Keep the generated name across updates.
			if IsAutonamed(r.Olds) && MetaString(r.Olds, "name") != "" {
				md["name"] = resource.NewProperty(MetaString(r.Olds, "name"))
				_ = setAutonamed()
			}
		} else {
			name := AutoName(r.LogicalName, r.RandomSeed)
			if a := r.Autonaming; a != nil {
				switch a.GetMode() {
				case pulumirpc.CheckRequest_AutonamingOptions_DISABLE:
					return nil, nil, errors.New("autonaming is disabled, resource requires the .metadata.name field to be set")
				case pulumirpc.CheckRequest_AutonamingOptions_ENFORCE, pulumirpc.CheckRequest_AutonamingOptions_PROPOSE:
					if a.GetProposedName() != "" {
						name = a.GetProposedName()
					}
				}
			}
			md["name"] = resource.NewProperty(name)
			_ = setAutonamed()
		}
	}
	if r.Kind.Namespaced && r.DefaultNamespace != "" && !isComputed(md, "namespace") {
		if ns, _ := strVal(md, "namespace"); ns == "" {
			md["namespace"] = resource.NewProperty(r.DefaultNamespace)
		}
	}
	news["metadata"] = resource.NewProperty(md)
	return news, failures, nil
}

// DiffOptions are the provider settings that change diff decisions.
type DiffOptions struct {
	ConfigMapMutable bool // enableConfigMapMutable: ConfigMap data changes update in place
	SecretMutable    bool // enableSecretMutable: Secret data changes update in place
}

type pattern []any // strings and "*" (any array index)

func parsePattern(s string) pattern {
	var p pattern
	for _, part := range strings.Split(strings.TrimPrefix(s, "."), ".") {
		wild := 0
		for strings.HasSuffix(part, "[*]") {
			part = strings.TrimSuffix(part, "[*]")
			wild++
		}
		if part != "" {
			p = append(p, part)
		}
		for i := 0; i < wild; i++ {
			p = append(p, "*")
		}
	}
	return p
}

func labelSelector(prefix string) []string {
	return []string{prefix, prefix + ".matchExpressions", prefix + ".matchLabels"}
}

func containerFields(prefixes ...string) []string {
	var out []string
	for _, p := range prefixes {
		for _, f := range []string{"args", "command", "env", "image", "imagePullPolicy", "lifecycle",
			"livenessProbe", "ports", "readinessProbe", "resources", "securityContext", "stdin", "stdinOnce",
			"terminationMessagePath", "terminationMessagePolicy", "tty", "volumeDevices", "volumeMounts",
			"workingDir"} {
			out = append(out, p+"."+f)
		}
	}
	return out
}

// forceNewByKind are the fields whose change replaces the object (the real provider's table,
// provider/pkg/provider/diff.go, for the kinds served here).
var forceNewByKind = map[string][]string{
	"v1/PersistentVolume": {"spec.awsElasticBlockStore", "spec.azureDisk", "spec.azureFile", "spec.cephfs",
		"spec.cinder", "spec.csi", "spec.fc", "spec.flexVolume", "spec.flocker", "spec.gcePersistentDisk",
		"spec.glusterfs", "spec.hostPath", "spec.iscsi", "spec.local", "spec.nfs", "spec.photonPersistentDisk",
		"spec.portworxVolume", "spec.quobyte", "spec.rbd", "spec.scaleIO", "spec.storageos", "spec.vsphereVolume"},
	"v1/PersistentVolumeClaim": append([]string{"spec.accessModes", "spec.storageClassName", "spec.volumeName"},
		labelSelector("spec.selector")...),
	"v1/Pod": append([]string{"spec.affinity", "spec.automountServiceAccountToken", "spec.dnsConfig",
		"spec.dnsPolicy", "spec.enableServiceLinks", "spec.hostAliases", "spec.hostIPC", "spec.hostNetwork",
		"spec.hostPID", "spec.hostname", "spec.imagePullSecrets", "spec.nodeName", "spec.nodeSelector",
		"spec.overhead", "spec.preemptionPolicy", "spec.priority", "spec.priorityClassName", "spec.readinessGates",
		"spec.restartPolicy", "spec.runtimeClassName", "spec.schedulerName", "spec.securityContext",
		"spec.serviceAccount", "spec.serviceAccountName", "spec.shareProcessNamespace", "spec.subdomain",
		"spec.terminationGracePeriodSeconds", "spec.volumes"},
		containerFields("spec.containers[*]", "spec.initContainers[*]")...),
	"v1/ResourceQuota":    {"spec.scopes"},
	"v1/Secret":           {"type"},
	"v1/Service":          {"spec.clusterIP"},
	"apps/v1/DaemonSet":   labelSelector("spec.selector"),
	"apps/v1/Deployment":  labelSelector("spec.selector"),
	"apps/v1/StatefulSet": append([]string{"spec.podManagementPolicy", "spec.revisionHistoryLimit", "spec.serviceName", "spec.volumeClaimTemplates"}, labelSelector("spec.selector")...),
	"batch/v1/Job":        append([]string{"spec.completions", "spec.parallelism", "spec.template"}, labelSelector("spec.selector")...),
	"rbac.authorization.k8s.io/v1/RoleBinding":        {"roleRef"},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": {"roleRef"},
	"storage.k8s.io/v1/StorageClass":                  {"parameters", "provisioner"},
}

func immutable(m resource.PropertyMap) bool {
	v, ok := m["immutable"]
	if !ok {
		return false
	}
	v = provsupport.Plain(v)
	return v.IsBool() && v.BoolValue()
}

// ForceNew lists the property paths whose change replaces an object of the kind.
func ForceNew(k Kind, news resource.PropertyMap, o DiffOptions) []string {
	out := []string{"apiVersion", "kind", "metadata.name", "metadata.namespace"}
	switch {
	case k.Group == "" && k.Kind == "ConfigMap" && (!o.ConfigMapMutable || immutable(news)):
		out = append(out, "binaryData", "data")
	case k.Group == "" && k.Kind == "Secret" && (!o.SecretMutable || immutable(news)):
		out = append(out, "type", "stringData", "data")
	default:
		out = append(out, forceNewByKind[k.APIVersion()+"/"+k.Kind]...)
	}
	return out
}

// matches: the pattern is a prefix of the path (the change is inside a force-new field) or the
// path is a prefix of the pattern (the change contains one).
func matches(p pattern, path resource.PropertyPath) bool {
	n := len(p)
	if len(path) < n {
		n = len(path)
	}
	for i := 0; i < n; i++ {
		switch want := p[i].(type) {
		case string:
			if want == "*" {
				if _, ok := path[i].(int); !ok {
					return false
				}
				continue
			}
			if got, ok := path[i].(string); !ok || got != want {
				return false
			}
		}
	}
	return true
}

// normalizeForDiff canonicalises what the API server would treat the same: the namespace of a
// namespaced object defaults to "default", cluster-scoped objects have none.
func normalizeForDiff(k Kind, m resource.PropertyMap) resource.PropertyMap {
	m = m.Copy()
	md, ok := obj(m, "metadata")
	if !ok {
		return m
	}
	md = md.Copy()
	if k.Namespaced {
		if !isComputed(md, "namespace") {
			if ns, _ := strVal(md, "namespace"); ns == "" {
				md["namespace"] = resource.NewProperty("default")
			}
		}
	} else {
		delete(md, "namespace")
	}
	m["metadata"] = resource.NewProperty(md)
	return m
}

// DiffRequest is what Diff needs.
type DiffRequest struct {
	Kind          Kind
	OldInputs     resource.PropertyMap
	OldOutputs    resource.PropertyMap // the live object as last read
	News          resource.PropertyMap
	IgnoreChanges []string
	Options       DiffOptions
}

// Diff compares the old inputs with the new ones. Changes of apiVersion, kind, metadata.name,
// metadata.namespace and the kind's immutable fields replace the object; anything else is an
// update. A replacement deletes first when the new object must have the same (user-chosen,
// not auto-generated) name in the same namespace.
func Diff(r DiffRequest) *pulumirpc.DiffResponse {
	olds := normalizeForDiff(r.Kind, r.OldInputs)
	news := normalizeForDiff(r.Kind, r.News)
	changes := provsupport.FilterIgnored(provsupport.DiffMaps(olds, news), r.IgnoreChanges)
	var pats []pattern
	for _, s := range ForceNew(r.Kind, r.News, r.Options) {
		pats = append(pats, parsePattern(s))
	}
	replace := func(c provsupport.Change) bool {
		for _, p := range pats {
			if matches(p, c.Path) {
				return true
			}
		}
		return false
	}
	oldName, oldNS := MetaString(r.OldOutputs, "name"), MetaString(r.OldOutputs, "namespace")
	if oldName == "" {
		oldName, oldNS = MetaString(olds, "name"), MetaString(olds, "namespace")
	}
	if r.Kind.Namespaced && oldNS == "" {
		oldNS = "default"
	}
	newName, newNS := MetaString(news, "name"), MetaString(news, "namespace")
	if !r.Kind.Namespaced {
		oldNS = ""
	}
	dbr := newName != "" && !IsAutonamed(news) && newName == oldName && newNS == oldNS
	return provsupport.DiffResponse(changes, replace, dbr)
}

// dropped from outputs: what changes on every write or is not part of the object's configuration.
var volatileMetadata = []string{"managedFields", "resourceVersion", "generation", "creationTimestamp", "selfLink"}

// CleanLive turns a live object into resource outputs: without status and without the
// metadata that changes on every write (managedFields, resourceVersion, generation,
// creationTimestamp).
func CleanLive(live map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range live {
		if k == "status" {
			continue
		}
		out[k] = v
	}
	if md, ok := live["metadata"].(map[string]any); ok {
		m := map[string]any{}
		for k, v := range md {
			m[k] = v
		}
		for _, k := range volatileMetadata {
			delete(m, k)
		}
		out["metadata"] = m
	}
	return out
}

// Outputs turns a live object into output properties; a Secret's data is secret.
func Outputs(k Kind, live map[string]any) resource.PropertyMap {
	out := FromPlain(CleanLive(live))
	if k.Group == "" && k.Kind == "Secret" {
		for _, key := range []resource.PropertyKey{"data", "stringData"} {
			if v, ok := out[key]; ok && !v.IsSecret() {
				out[key] = resource.MakeSecret(v)
			}
		}
	}
	return out
}

func pruneValue(live, shape any) any {
	switch s := shape.(type) {
	case map[string]any:
		if l, ok := live.(map[string]any); ok {
			return pruneMap(l, s)
		}
	case []any:
		if l, ok := live.([]any); ok && len(l) == len(s) {
			out := make([]any, len(l))
			for i := range l {
				out[i] = pruneValue(l[i], s[i])
			}
			return out
		}
	}
	return live
}

func pruneMap(live, shape map[string]any) map[string]any {
	out := map[string]any{}
	for k, sv := range shape {
		if lv, ok := live[k]; ok {
			out[k] = pruneValue(lv, sv)
		}
	}
	return out
}

// InputsFromLive derives new inputs from a live object on refresh: the live values of the
// fields the old inputs set (so a field edited with kubectl shows up as a difference, and
// fields the server defaulted do not). A Secret's stringData is read back from its data.
func InputsFromLive(k Kind, oldInputs, live map[string]any) map[string]any {
	if len(oldInputs) == 0 {
		return importInputs(k, live)
	}
	out := pruneMap(live, oldInputs)
	if k.Group == "" && k.Kind == "Secret" {
		if sd, ok := oldInputs["stringData"].(map[string]any); ok {
			data, _ := live["data"].(map[string]any)
			got := map[string]any{}
			for key := range sd {
				if enc, ok := data[key].(string); ok {
					if dec, err := base64.StdEncoding.DecodeString(enc); err == nil {
						got[key] = string(dec)
					}
				}
			}
			out["stringData"] = got
		}
	}
	return out
}

// importInputs are the inputs of an object read without previous inputs (import, get).
func importInputs(k Kind, live map[string]any) map[string]any {
	out := map[string]any{"apiVersion": k.APIVersion(), "kind": k.Kind}
	for _, f := range k.Fields {
		if v, ok := live[f]; ok {
			out[f] = v
		}
	}
	if md, ok := live["metadata"].(map[string]any); ok {
		m := map[string]any{}
		for _, f := range []string{"name", "namespace", "labels", "annotations", "generateName", "finalizers"} {
			if v, ok := md[f]; ok {
				m[f] = v
			}
		}
		if ann, ok := m["annotations"].(map[string]any); ok {
			a := map[string]any{}
			for key, v := range ann {
				if key != "kubectl.kubernetes.io/last-applied-configuration" && key != "deployment.kubernetes.io/revision" {
					a[key] = v
				}
			}
			if len(a) == 0 {
				delete(m, "annotations")
			} else {
				m["annotations"] = a
			}
		}
		out["metadata"] = m
	}
	return out
}

// MergePatch computes the JSON merge patch (RFC 7386) that turns old into new: removed keys
// become null, changed objects are patched recursively, anything else is replaced.
func MergePatch(old, new map[string]any) map[string]any {
	patch := map[string]any{}
	for k := range old {
		if _, ok := new[k]; !ok {
			patch[k] = nil
		}
	}
	keys := make([]string, 0, len(new))
	for k := range new {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		nv := new[k]
		ov, had := old[k]
		if had && reflect.DeepEqual(ov, nv) {
			continue
		}
		om, oIsMap := ov.(map[string]any)
		nm, nIsMap := nv.(map[string]any)
		if had && oIsMap && nIsMap {
			if sub := MergePatch(om, nm); len(sub) > 0 {
				patch[k] = sub
			}
			continue
		}
		patch[k] = nv
	}
	return patch
}
