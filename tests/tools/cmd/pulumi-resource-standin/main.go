// pulumi-resource-standin: a TEST STAND-IN provider plugin, for tests only (never shipped).
// It serves the `standin` package (standin:index:Record, standin:index:Fail, standin:index:Sleep),
// the resource types the project's tests use, to the real Pulumi CLI, which loads it as an
// ambient plugin from PATH. See internal/standin for the semantics.
package main

import (
	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
	"github.com/pulumi-operator-rs/test-tools/internal/standin"
)

func main() {
	provsupport.Serve("standin", standin.New)
}
