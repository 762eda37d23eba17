// pulumi-resource-kubernetes: a TEST STAND-IN for the Pulumi Kubernetes provider plugin
// (github.com/pulumi/pulumi-kubernetes), for tests only (never shipped). The real provider's Go
// module cannot be fetched here, so this small generic provider serves the `kubernetes` package
// (kubernetes:core/v1:ConfigMap, kubernetes:apps/v1:Deployment, ...) to the real Pulumi CLI, which
// loads it as an ambient plugin from PATH. See internal/kubernetes for what it does and does not do.
package main

import (
	"github.com/pulumi-operator-rs/test-tools/internal/kubernetes"
	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
)

func main() {
	provsupport.Serve("kubernetes", kubernetes.New)
}
