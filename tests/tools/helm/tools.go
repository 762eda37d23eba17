//go:build tools

// Helm, in a module of its own (its Kubernetes client libraries need not match the cluster's
// pinned k8s.io/kubernetes): the chart's tests run `helm lint`, `helm template` and `helm
// install` with it (tests/helm_chart.rs).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
