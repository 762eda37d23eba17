//go:build tools

// The Pulumi Go language host the tests run, pinned by this module's go.mod/go.sum (see go.mod
// for why sdk/v3 v3.66.0, older than the Node.js and Python hosts' v3.68.0).
package tools

import _ "github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go"
