// pulumi-resource-random: a TEST STAND-IN for the Pulumi random provider plugin
// (github.com/pulumi/pulumi-random), for tests only (never shipped). The real provider's Go module
// cannot be fetched here, so this small provider serves the `random` package
// (random:index/randomPet:RandomPet, RandomString, RandomPassword, RandomId, RandomInteger,
// RandomUuid) to the real Pulumi CLI, which loads it as an ambient plugin from PATH. See
// internal/random for what it does and does not do.
package main

import (
	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
	"github.com/pulumi-operator-rs/test-tools/internal/random"
)

func main() {
	provsupport.Serve("random", random.New)
}
