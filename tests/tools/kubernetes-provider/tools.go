//go:build tools

// The real Pulumi Kubernetes provider plugin (pulumi-resource-kubernetes v4.25.0) the tests run,
// pinned by this module's go.mod/go.sum and built by build.sh. Its main package cannot be imported
// (and needs generated files), so this imports what it is built from: the provider packages, the
// schema package its generate.go runs with, and the two SDK modules whose pins go.mod explains.
package tools

import (
	_ "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	_ "github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
	_ "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes"
	_ "github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	_ "github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)
