package kubernetes

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// noLoader satisfies schema.Loader; the schema references no other packages, so it is never called.
type noLoader struct{ schema.Loader }

func TestSchemaBinds(t *testing.T) {
	var spec schema.PackageSpec
	if err := json.Unmarshal(Schema(), &spec); err != nil {
		t.Fatal(err)
	}
	pkg, diags, err := schema.BindSpec(spec, noLoader{}, schema.ValidationOptions{})
	if err != nil || diags.HasErrors() {
		t.Fatalf("schema does not bind: %v %v", err, diags)
	}
	for _, tok := range []string{"kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:Secret", "kubernetes:core/v1:Namespace",
		"kubernetes:core/v1:ServiceAccount", "kubernetes:core/v1:Service", "kubernetes:core/v1:Pod",
		"kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet", "kubernetes:batch/v1:Job",
		"kubernetes:rbac.authorization.k8s.io/v1:Role", "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
		"kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
		"kubernetes:networking.k8s.io/v1:Ingress"} {
		r, ok := pkg.GetResource(tok)
		if !ok {
			t.Errorf("resource %s missing", tok)
			continue
		}
		consts := map[string]any{}
		for _, p := range r.Properties {
			if p.ConstValue != nil {
				consts[p.Name] = p.ConstValue
			}
		}
		k, _ := KindForToken(tok)
		if consts["apiVersion"] != k.APIVersion() || consts["kind"] != k.Kind {
			t.Errorf("%s: constants %v", tok, consts)
		}
	}
	secret, _ := pkg.GetResource("kubernetes:core/v1:Secret")
	for _, p := range secret.Properties {
		if (p.Name == "data" || p.Name == "stringData") && !p.Secret {
			t.Errorf("Secret.%s is not secret", p.Name)
		}
	}
}

func TestKinds(t *testing.T) {
	for tok, want := range map[string][3]string{
		"kubernetes:core/v1:ConfigMap":                        {"v1", "ConfigMap", "configmaps"},
		"kubernetes:apps/v1:Deployment":                       {"apps/v1", "Deployment", "deployments"},
		"kubernetes:rbac.authorization.k8s.io/v1:Role":        {"rbac.authorization.k8s.io/v1", "Role", "roles"},
		"kubernetes:networking.k8s.io/v1:Ingress":             {"networking.k8s.io/v1", "Ingress", "ingresses"},
		"kubernetes:batch/v1:Job":                             {"batch/v1", "Job", "jobs"},
		"kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": {"rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles"},
	} {
		k, err := KindForToken(tok)
		if err != nil {
			t.Fatal(err)
		}
		if k.APIVersion() != want[0] || k.Kind != want[1] || k.GVR().Resource != want[2] || k.Token() != tok {
			t.Errorf("%s: %+v", tok, k)
		}
	}
	for tok, ns := range map[string]bool{"kubernetes:core/v1:Namespace": false, "kubernetes:core/v1:Secret": true,
		"kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": false} {
		if k, _ := KindForToken(tok); k.Namespaced != ns {
			t.Errorf("%s namespaced=%v", tok, k.Namespaced)
		}
	}
	if _, err := KindForToken("kubernetes:core/v1:Nope"); err == nil {
		t.Error("unknown token accepted")
	}
	if ns, n := ParseID("team/web"); ns != "team" || n != "web" {
		t.Error(ns, n)
	}
	if ns, n := ParseID("cluster-wide"); ns != "" || n != "cluster-wide" {
		t.Error(ns, n)
	}
	if ID("", "x") != "x" || ID("a", "x") != "a/x" {
		t.Error("ID")
	}
}

func pm(m map[string]any) resource.PropertyMap { return resource.NewPropertyMapFromMap(m) }

var configMap, _ = KindForToken("kubernetes:core/v1:ConfigMap")
var namespaceKind, _ = KindForToken("kubernetes:core/v1:Namespace")

func TestAutoNaming(t *testing.T) {
	n1, n2 := AutoName("web", []byte("seed")), AutoName("web", []byte("seed"))
	if n1 != n2 || !regexp.MustCompile(`^web-[0-9a-f]{8}$`).MatchString(n1) {
		t.Errorf("names %q %q", n1, n2)
	}
	if AutoName("web", nil) == AutoName("web", nil) {
		t.Error("unseeded names must differ")
	}

	checked, failures, err := CheckInputs(CheckRequest{Kind: configMap, LogicalName: "settings",
		News: pm(map[string]any{"data": map[string]any{"a": "1"}}), DefaultNamespace: "team", RandomSeed: []byte{1}})
	if err != nil || len(failures) != 0 {
		t.Fatal(err, failures)
	}
	name := MetaString(checked, "name")
	if !regexp.MustCompile(`^settings-[0-9a-f]{8}$`).MatchString(name) || !IsAutonamed(checked) ||
		MetaString(checked, "namespace") != "team" || checked["apiVersion"].StringValue() != "v1" ||
		checked["kind"].StringValue() != "ConfigMap" {
		t.Errorf("checked %v", checked)
	}

	// The generated name is kept on updates.
	again, _, _ := CheckInputs(CheckRequest{Kind: configMap, LogicalName: "settings", Olds: checked,
		News: pm(map[string]any{"data": map[string]any{"a": "2"}}), DefaultNamespace: "team", RandomSeed: []byte{2}})
	if MetaString(again, "name") != name || !IsAutonamed(again) {
		t.Errorf("name not kept: %v", again)
	}

	// A user-chosen name stays, without the annotation; cluster-scoped kinds get no namespace.
	named, _, _ := CheckInputs(CheckRequest{Kind: namespaceKind, LogicalName: "ns",
		News: pm(map[string]any{"metadata": map[string]any{"name": "mine"}}), DefaultNamespace: "team"})
	if MetaString(named, "name") != "mine" || IsAutonamed(named) || MetaString(named, "namespace") != "" {
		t.Errorf("named %v", named)
	}

	// An unknown name (preview) is not replaced.
	unknown := pm(map[string]any{})
	unknown["metadata"] = resource.NewProperty(resource.PropertyMap{"name": resource.MakeComputed(resource.NewProperty(""))})
	prev, _, _ := CheckInputs(CheckRequest{Kind: configMap, LogicalName: "x", News: unknown})
	if md := prev["metadata"].ObjectValue(); !md["name"].IsComputed() || IsAutonamed(prev) {
		t.Errorf("preview %v", prev)
	}

	// Wrong apiVersion fails the check; engine autonaming options are honoured.
	_, failures, _ = CheckInputs(CheckRequest{Kind: configMap, LogicalName: "x", News: pm(map[string]any{"apiVersion": "v2"})})
	if len(failures) != 1 || failures[0].Property != "apiVersion" {
		t.Errorf("failures %v", failures)
	}
	proposed, _, _ := CheckInputs(CheckRequest{Kind: configMap, LogicalName: "x", News: pm(nil),
		Autonaming: &pulumirpc.CheckRequest_AutonamingOptions{ProposedName: "exact", Mode: pulumirpc.CheckRequest_AutonamingOptions_ENFORCE}})
	if MetaString(proposed, "name") != "exact" {
		t.Errorf("proposed %v", proposed)
	}
	if _, _, err := CheckInputs(CheckRequest{Kind: configMap, LogicalName: "x", News: pm(nil),
		Autonaming: &pulumirpc.CheckRequest_AutonamingOptions{Mode: pulumirpc.CheckRequest_AutonamingOptions_DISABLE}}); err == nil {
		t.Error("disabled autonaming must fail without a name")
	}
}

func cm(name, ns string, autonamed bool, data map[string]any, labels map[string]any) resource.PropertyMap {
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	if autonamed {
		md["annotations"] = map[string]any{AnnotationAutonamed: "true"}
	}
	if labels != nil {
		md["labels"] = labels
	}
	m := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md}
	if data != nil {
		m["data"] = data
	}
	return pm(m)
}

func TestDiffDecisions(t *testing.T) {
	base := cm("app", "team", false, map[string]any{"a": "1"}, map[string]any{"x": "1"})

	same := Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base, News: base})
	if same.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("same: %v", same)
	}

	// A label change is an in-place update.
	d := Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base,
		News: cm("app", "team", false, map[string]any{"a": "1"}, map[string]any{"x": "2"})})
	if d.Changes != pulumirpc.DiffResponse_DIFF_SOME || len(d.Replaces) != 0 ||
		d.DetailedDiff["metadata.labels.x"].GetKind() != pulumirpc.PropertyDiff_UPDATE {
		t.Errorf("label: %v", d)
	}

	// ConfigMap data: a replacement (delete first: the name is fixed) unless enableConfigMapMutable.
	newData := cm("app", "team", false, map[string]any{"a": "2"}, map[string]any{"x": "1"})
	d = Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base, News: newData})
	if len(d.Replaces) != 1 || d.Replaces[0] != "data" || !d.DeleteBeforeReplace ||
		d.DetailedDiff["data.a"].GetKind() != pulumirpc.PropertyDiff_UPDATE_REPLACE {
		t.Errorf("data: %v", d)
	}
	d = Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base, News: newData,
		Options: DiffOptions{ConfigMapMutable: true}})
	if len(d.Replaces) != 0 || d.Changes != pulumirpc.DiffResponse_DIFF_SOME {
		t.Errorf("mutable data: %v", d)
	}

	// Auto-named: replaced without deleting first (the replacement gets a new name).
	auto := cm("app-1234abcd", "team", true, map[string]any{"a": "1"}, nil)
	d = Diff(DiffRequest{Kind: configMap, OldInputs: auto, OldOutputs: auto,
		News: cm("app-1234abcd", "team", true, map[string]any{"a": "2"}, nil)})
	if len(d.Replaces) == 0 || d.DeleteBeforeReplace {
		t.Errorf("autonamed: %v", d)
	}

	// Renaming or moving is a replacement; not deleting first, since the names differ.
	d = Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base,
		News: cm("other", "team", false, map[string]any{"a": "1"}, map[string]any{"x": "1"})})
	if len(d.Replaces) != 1 || d.Replaces[0] != "metadata" || d.DeleteBeforeReplace {
		t.Errorf("rename: %v", d)
	}
	d = Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base,
		News: cm("app", "elsewhere", false, map[string]any{"a": "1"}, map[string]any{"x": "1"})})
	if d.DetailedDiff["metadata.namespace"].GetKind() != pulumirpc.PropertyDiff_UPDATE_REPLACE || d.DeleteBeforeReplace {
		t.Errorf("move: %v", d)
	}
	// No namespace means "default".
	d = Diff(DiffRequest{Kind: configMap, OldInputs: cm("app", "", false, nil, nil), OldOutputs: cm("app", "default", false, nil, nil),
		News: cm("app", "default", false, nil, nil)})
	if d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("default namespace: %v", d)
	}
	// ignoreChanges.
	d = Diff(DiffRequest{Kind: configMap, OldInputs: base, OldOutputs: base, News: newData, IgnoreChanges: []string{"data"}})
	if d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("ignored: %v", d)
	}

	// Deployments: replicas update in place, the selector replaces; Pods: a container image replaces.
	dep, _ := KindForToken("kubernetes:apps/v1:Deployment")
	deploy := func(replicas int, app string) resource.PropertyMap {
		return pm(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "d", "namespace": "n"},
			"spec": map[string]any{"replicas": replicas, "selector": map[string]any{"matchLabels": map[string]any{"app": app}}}})
	}
	d = Diff(DiffRequest{Kind: dep, OldInputs: deploy(1, "a"), News: deploy(2, "a")})
	if len(d.Replaces) != 0 || d.DetailedDiff["spec.replicas"].GetKind() != pulumirpc.PropertyDiff_UPDATE {
		t.Errorf("replicas: %v", d)
	}
	d = Diff(DiffRequest{Kind: dep, OldInputs: deploy(1, "a"), News: deploy(1, "b")})
	if d.DetailedDiff["spec.selector.matchLabels.app"].GetKind() != pulumirpc.PropertyDiff_UPDATE_REPLACE || !d.DeleteBeforeReplace {
		t.Errorf("selector: %v", d)
	}
	pod, _ := KindForToken("kubernetes:core/v1:Pod")
	mkPod := func(image string) resource.PropertyMap {
		return pm(map[string]any{"metadata": map[string]any{"name": "p"},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": image}}}})
	}
	d = Diff(DiffRequest{Kind: pod, OldInputs: mkPod("a"), News: mkPod("b")})
	if d.DetailedDiff["spec.containers[0].image"].GetKind() != pulumirpc.PropertyDiff_UPDATE_REPLACE {
		t.Errorf("pod image: %v", d)
	}
}

func TestCleanLiveAndOutputs(t *testing.T) {
	live := map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"data":   map[string]any{"pw": "aHVudGVyMg=="},
		"status": map[string]any{"phase": "x"},
		"metadata": map[string]any{"name": "s", "namespace": "n", "uid": "u-1", "resourceVersion": "42",
			"generation": int64(3), "creationTimestamp": "2024-01-01T00:00:00Z", "managedFields": []any{}},
	}
	clean := CleanLive(live)
	md := clean["metadata"].(map[string]any)
	if _, ok := clean["status"]; ok {
		t.Error("status kept")
	}
	for _, k := range []string{"resourceVersion", "generation", "creationTimestamp", "managedFields"} {
		if _, ok := md[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
	if md["uid"] != "u-1" || md["name"] != "s" {
		t.Errorf("metadata %v", md)
	}
	if _, ok := live["metadata"].(map[string]any)["resourceVersion"]; !ok {
		t.Error("CleanLive modified its input")
	}
	secret, _ := KindForToken("kubernetes:core/v1:Secret")
	outs := Outputs(secret, live)
	if !outs["data"].IsSecret() || outs["type"].IsSecret() {
		t.Errorf("outputs %v", outs)
	}
	if outs := Outputs(configMap, map[string]any{"data": map[string]any{"a": "1"}}); outs["data"].IsSecret() {
		t.Error("ConfigMap data must not be secret")
	}
}

func TestInputsFromLive(t *testing.T) {
	old := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "n"}, "data": map[string]any{"a": "1"}}
	live := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "n", "uid": "u", "resourceVersion": "7"},
		"data":     map[string]any{"a": "1"}}
	same := InputsFromLive(configMap, old, live)
	if d := Diff(DiffRequest{Kind: configMap, OldInputs: FromPlain(same), News: FromPlain(old)}); d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("unchanged object shows a diff: %v (%v)", d, same)
	}
	live["data"] = map[string]any{"a": "edited", "b": "added"}
	drifted := InputsFromLive(configMap, old, live)
	if drifted["data"].(map[string]any)["a"] != "edited" {
		t.Errorf("drift not read: %v", drifted)
	}
	d := Diff(DiffRequest{Kind: configMap, OldInputs: FromPlain(drifted), OldOutputs: FromPlain(CleanLive(live)), News: FromPlain(old)})
	if d.Changes != pulumirpc.DiffResponse_DIFF_SOME {
		t.Errorf("drift not diffed: %v", d)
	}

	// A Deployment's server-side defaults do not show up as differences.
	dep, _ := KindForToken("kubernetes:apps/v1:Deployment")
	oldDep := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "c", "image": "i"}}}}}}
	liveDep := map[string]any{"spec": map[string]any{"replicas": int64(1), "template": map[string]any{"spec": map[string]any{
		"restartPolicy": "Always", "containers": []any{map[string]any{"name": "c", "image": "i", "imagePullPolicy": "Always"}}}}}}
	if d := Diff(DiffRequest{Kind: dep, OldInputs: FromPlain(InputsFromLive(dep, oldDep, liveDep)), News: FromPlain(oldDep)}); d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("defaults diffed: %v", d)
	}

	// A Secret's stringData is read back from data.
	secret, _ := KindForToken("kubernetes:core/v1:Secret")
	oldSecret := map[string]any{"stringData": map[string]any{"pw": "hunter2"}}
	liveSecret := map[string]any{"data": map[string]any{"pw": "aHVudGVyMg=="}}
	if got := InputsFromLive(secret, oldSecret, liveSecret); got["stringData"].(map[string]any)["pw"] != "hunter2" {
		t.Errorf("stringData %v", got)
	}

	// Import: no old inputs.
	imp := InputsFromLive(configMap, nil, map[string]any{"data": map[string]any{"a": "1"}, "metadata": map[string]any{
		"name": "c", "uid": "u", "annotations": map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{}"}}})
	if imp["apiVersion"] != "v1" || imp["kind"] != "ConfigMap" || imp["metadata"].(map[string]any)["uid"] != nil ||
		imp["metadata"].(map[string]any)["annotations"] != nil {
		t.Errorf("import %v", imp)
	}
}

func TestMergePatch(t *testing.T) {
	old := map[string]any{"data": map[string]any{"a": "1", "b": "2"}, "metadata": map[string]any{"name": "x", "labels": map[string]any{"l": "1"}}}
	new := map[string]any{"data": map[string]any{"a": "1", "c": "3"}, "metadata": map[string]any{"name": "x"}, "immutable": false}
	got, _ := json.Marshal(MergePatch(old, new))
	want := `{"data":{"b":null,"c":"3"},"immutable":false,"metadata":{"labels":null}}`
	if string(got) != want {
		t.Errorf("got %s want %s", got, want)
	}
	if p := MergePatch(old, old); len(p) != 0 {
		t.Errorf("no-op patch %v", p)
	}
}

func TestToPlain(t *testing.T) {
	m := resource.PropertyMap{
		"n":   resource.NewProperty(3.0),
		"f":   resource.NewProperty(1.5),
		"s":   resource.MakeSecret(resource.NewProperty("x")),
		"nil": resource.NewNullProperty(),
	}
	p, err := ToPlainMap(m)
	if err != nil || p["n"] != int64(3) || p["f"] != 1.5 || p["s"] != "x" {
		t.Errorf("%v %v", p, err)
	}
	if _, ok := p["nil"]; ok {
		t.Error("null kept")
	}
	if _, err := ToPlainMap(resource.PropertyMap{"u": resource.MakeComputed(resource.NewProperty(""))}); err == nil {
		t.Error("unknown accepted")
	}
}

func TestARejectionWithSeveralCausesIsOneLinePerCause(t *testing.T) {
	st := metav1.Status{
		Message: `ConfigMap "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name": x, data[bad key]: Invalid value: "bad key": y]`,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
			{Field: "metadata.name", Message: `Invalid value: "Bad_Name": x`},
			{Field: "data[bad key]", Message: `Invalid value: "bad key": y`},
		}},
	}
	want := "ConfigMap \"Bad_Name\" is invalid: 2 errors occurred:\n\t* metadata.name: Invalid value: \"Bad_Name\": x\n\t* data[bad key]: Invalid value: \"bad key\": y"
	if got := formatStatus(st); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	one := metav1.Status{Message: "configmaps \"x\" already exists"}
	if got := formatStatus(one); got != one.Message {
		t.Fatalf("got %q", got)
	}
}
