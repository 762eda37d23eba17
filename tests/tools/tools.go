//go:build tools

// The Go programs the tests run, pinned by this module's go.mod/go.sum and built by
// tests/build-tools.sh (the YAML language host has a module of its own: ./yaml).
package tools

import (
	_ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
