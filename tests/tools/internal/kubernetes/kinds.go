// Package kubernetes implements the `kubernetes` TEST STAND-IN provider plugin
// (pulumi-resource-kubernetes): a small generic Kubernetes provider that behaves like the real
// pulumi-kubernetes v4 provider where the project's tests can observe it (resource tokens, schema
// shape, auto-naming, default namespace, IDs, diff/replace decisions, refresh drift, error
// texts). For tests only; never shipped.
package kubernetes

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is one Kubernetes kind the provider serves.
type Kind struct {
	Group      string // "" for the legacy core group
	Version    string
	Kind       string
	Resource   string // plural REST resource name
	Namespaced bool
	Fields     []string // top-level fields besides apiVersion, kind and metadata
}

// Token is the Pulumi resource token, `kubernetes:<group>/<version>:<Kind>` (group `core` for "").
func (k Kind) Token() string {
	g := k.Group
	if g == "" {
		g = "core"
	}
	return "kubernetes:" + g + "/" + k.Version + ":" + k.Kind
}

// APIVersion is the Kubernetes apiVersion (`v1`, `apps/v1`).
func (k Kind) APIVersion() string {
	if k.Group == "" {
		return k.Version
	}
	return k.Group + "/" + k.Version
}

// GVR is the REST resource of the kind.
func (k Kind) GVR() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: k.Group, Version: k.Version, Resource: k.Resource}
}

var (
	spec       = []string{"spec"}
	roleFields = []string{"rules"}
	binding    = []string{"roleRef", "subjects"}
)

// Kinds lists every kind the provider serves (its schema has one resource per entry).
var Kinds = []Kind{
	{"", "v1", "ConfigMap", "configmaps", true, []string{"binaryData", "data", "immutable"}},
	{"", "v1", "Secret", "secrets", true, []string{"data", "immutable", "stringData", "type"}},
	{"", "v1", "Namespace", "namespaces", false, spec},
	{"", "v1", "ServiceAccount", "serviceaccounts", true, []string{"automountServiceAccountToken", "imagePullSecrets", "secrets"}},
	{"", "v1", "Service", "services", true, spec},
	{"", "v1", "Pod", "pods", true, spec},
	{"", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, spec},
	{"", "v1", "PersistentVolume", "persistentvolumes", false, spec},
	{"", "v1", "ResourceQuota", "resourcequotas", true, spec},
	{"", "v1", "LimitRange", "limitranges", true, spec},
	{"", "v1", "Endpoints", "endpoints", true, []string{"subsets"}},
	{"apps", "v1", "Deployment", "deployments", true, spec},
	{"apps", "v1", "StatefulSet", "statefulsets", true, spec},
	{"apps", "v1", "DaemonSet", "daemonsets", true, spec},
	{"apps", "v1", "ReplicaSet", "replicasets", true, spec},
	{"batch", "v1", "Job", "jobs", true, spec},
	{"batch", "v1", "CronJob", "cronjobs", true, spec},
	{"rbac.authorization.k8s.io", "v1", "Role", "roles", true, roleFields},
	{"rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true, binding},
	{"rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false, []string{"aggregationRule", "rules"}},
	{"rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, binding},
	{"networking.k8s.io", "v1", "Ingress", "ingresses", true, spec},
	{"networking.k8s.io", "v1", "IngressClass", "ingressclasses", false, spec},
	{"networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true, spec},
	{"policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, spec},
	{"coordination.k8s.io", "v1", "Lease", "leases", true, spec},
	{"autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", true, spec},
	{"scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", false, []string{"description", "globalDefault", "preemptionPolicy", "value"}},
	{"storage.k8s.io", "v1", "StorageClass", "storageclasses", false, []string{"allowVolumeExpansion", "allowedTopologies", "mountOptions", "parameters", "provisioner", "reclaimPolicy", "volumeBindingMode"}},
	{"apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", false, spec},
}

var byToken = func() map[string]Kind {
	m := map[string]Kind{}
	for _, k := range Kinds {
		m[k.Token()] = k
	}
	return m
}()

// KindForToken finds the kind of a resource token (`kubernetes:apps/v1:Deployment`).
func KindForToken(token string) (Kind, error) {
	if k, ok := byToken[token]; ok {
		return k, nil
	}
	var known []string
	for t := range byToken {
		known = append(known, t)
	}
	sort.Strings(known)
	return Kind{}, fmt.Errorf("resource type %q is not served by this Kubernetes test stand-in provider (it serves %s)",
		token, strings.Join(known, ", "))
}

// ParseID splits a resource ID (`<namespace>/<name>` or `<name>`).
func ParseID(id string) (namespace, name string) {
	if i := strings.Index(id, "/"); i >= 0 {
		return id[:i], id[i+1:]
	}
	return "", id
}

// ID builds the resource ID the real provider uses: `<namespace>/<name>`, or `<name>` for
// cluster-scoped objects.
func ID(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
