//go:build tools

// The Pulumi Node.js and Python language hosts the tests run, pinned by this module's
// go.mod/go.sum (see go.mod for why sdk/v3 v3.68.0 and what these old hosts do not read). They
// are built as pulumi-language-{nodejs,python}-host and run behind the test adapters
// ./cmd/pulumi-language-{nodejs,python} (see ./internal/adapter). Beside them go scripts of the
// same sdk version: python/cmd/pulumi-language-python-exec (the Python host runs it to start a
// program) and {nodejs,python}/dist/pulumi-analyzer-policy{,-python} (the adapters run them to
// start a policy pack).
package tools

import (
	_ "github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs"
	_ "github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python"
)
