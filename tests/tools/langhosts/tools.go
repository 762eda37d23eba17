//go:build tools

// The Pulumi Node.js and Python language hosts the tests run, pinned by this module's
// go.mod/go.sum (see go.mod for why sdk/v3 v3.68.0 and what these old hosts do not read). The
// Python host also needs the script python/cmd/pulumi-language-python-exec of the same sdk
// version next to its binary.
package tools

import (
	_ "github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs"
	_ "github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python"
)
