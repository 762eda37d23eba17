//go:build tools

// The Pulumi YAML language host the tests run, pinned by this module's go.mod/go.sum and
// built by tests/build-tools.sh.
package tools

import _ "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml"
