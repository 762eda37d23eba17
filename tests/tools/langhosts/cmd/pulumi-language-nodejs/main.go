// pulumi-language-nodejs: a TEST ADAPTER (never shipped) in front of the real Node.js language
// host, pulumi-language-nodejs-host beside it, built from github.com/pulumi/pulumi/sdk/v3 v3.68.0:
// the newest Node.js host the Go module proxy serves (the host's own module is refused). The
// v3.259 CLI runs a TypeScript/JavaScript policy pack through the host's RunPlugin call, which
// that host answers with "not supported"; this adapter forwards every call to the real host but
// runs those policy packs itself, with the sdk's pulumi-analyzer-policy script beside it (see
// ../../internal/adapter). Current hosts (in the pulumi/pulumi-nodejs images users run) need
// nothing of the kind.
package main

import "github.com/pulumi-operator-rs/test-tools/langhosts/internal/adapter"

func main() {
	adapter.Main(adapter.Config{
		Name:   "pulumi-language-nodejs",
		Host:   "pulumi-language-nodejs-host",
		Script: "pulumi-analyzer-policy",
	})
}
