package kubernetes

import "encoding/json"

// Version is the plugin version reported to the engine and in the schema.
const Version = "4.23.0"

const objectMetaToken = "kubernetes:meta/v1:ObjectMeta"

// ConfigKeys are the provider configuration keys understood (or accepted and ignored), as
// `kubernetes:<key>` stack config or explicit provider inputs.
var ConfigKeys = map[string]string{
	"kubeconfig":                  "string",
	"context":                     "string",
	"cluster":                     "string",
	"namespace":                   "string",
	"clusterIdentifier":           "string",
	"enableConfigMapMutable":      "boolean",
	"enableSecretMutable":         "boolean",
	"enableServerSideApply":       "boolean",
	"deleteUnreachable":           "boolean",
	"skipUpdateUnreachable":       "boolean",
	"suppressDeprecationWarnings": "boolean",
	"suppressHelmHookWarnings":    "boolean",
}

var configDescriptions = map[string]string{
	"kubeconfig": "The contents of a kubeconfig file or the path to one. Without it: $KUBECONFIG or ~/.kube/config, " +
		"else the in-cluster service account.",
	"context":                "The kubeconfig context to use.",
	"cluster":                "The kubeconfig cluster to use.",
	"namespace":              "The default namespace of namespaced objects without metadata.namespace.",
	"enableConfigMapMutable": "Update ConfigMap data in place instead of replacing the ConfigMap.",
	"enableSecretMutable":    "Update Secret data in place instead of replacing the Secret.",
}

// Schema returns the package schema (JSON).
func Schema() []byte {
	anyRef := map[string]any{"$ref": "pulumi.json#/Any"}
	str := map[string]any{"type": "string"}
	strMap := map[string]any{"type": "object", "additionalProperties": str}
	meta := map[string]any{
		"type":        "object",
		"description": "Standard object metadata.",
		"properties": map[string]any{
			"name":            str,
			"namespace":       str,
			"generateName":    str,
			"labels":          strMap,
			"annotations":     strMap,
			"finalizers":      map[string]any{"type": "array", "items": str},
			"ownerReferences": map[string]any{"type": "array", "items": anyRef},
			"uid":             str,
		},
	}
	resources := map[string]any{}
	for _, k := range Kinds {
		props := map[string]any{
			"apiVersion": map[string]any{"type": "string", "const": k.APIVersion(),
				"description": "APIVersion defines the versioned schema of this representation of an object."},
			"kind": map[string]any{"type": "string", "const": k.Kind,
				"description": "Kind is a string value representing the REST resource this object represents."},
			"metadata": map[string]any{"$ref": "#/types/" + objectMetaToken,
				"description": "Standard object metadata; metadata.name is generated when not set."},
		}
		for _, f := range k.Fields {
			props[f] = anyRef
		}
		if k.Group == "" && k.Kind == "Secret" {
			props["data"] = map[string]any{"type": "object", "additionalProperties": str, "secret": true}
			props["stringData"] = map[string]any{"type": "object", "additionalProperties": str, "secret": true}
			props["type"] = str
		}
		if k.Group == "" && k.Kind == "ConfigMap" {
			props["data"] = strMap
			props["binaryData"] = strMap
		}
		resources[k.Token()] = map[string]any{
			"description":     k.Kind + " (" + k.APIVersion() + ").",
			"inputProperties": props,
			"properties":      props,
			"required":        []string{"apiVersion", "kind", "metadata"},
		}
	}
	cfgProps := map[string]any{}
	for key, typ := range ConfigKeys {
		p := map[string]any{"type": typ}
		if d, ok := configDescriptions[key]; ok {
			p["description"] = d
		}
		cfgProps[key] = p
	}
	spec := map[string]any{
		"name":        "kubernetes",
		"displayName": "Kubernetes (test stand-in)",
		"version":     Version,
		"description": "TEST STAND-IN for the Pulumi Kubernetes provider, for the pulumi-operator-rs tests. Never shipped.",
		"meta":        map[string]any{"moduleFormat": "(.*)"},
		"config":      map[string]any{"variables": cfgProps},
		"provider": map[string]any{
			"description":     "The provider type for the kubernetes package.",
			"inputProperties": cfgProps,
		},
		"types":     map[string]any{objectMetaToken: meta},
		"resources": resources,
	}
	b, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return b
}
