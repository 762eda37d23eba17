// pulumi-language-python: a TEST ADAPTER (never shipped) in front of the real Python language
// host, pulumi-language-python-host beside it, built from github.com/pulumi/pulumi/sdk/v3
// v3.68.0: the newest Python host the Go module proxy serves (the host's own module is refused).
// That host reads a project's runtime options (`virtualenv`) only from its command-line flags,
// which the Pulumi CLI of that time passed; the v3.259 CLI sends them in a ProgramInfo message
// the old host does not know, so the old host would create the virtualenv in the project root
// and run the system python. This adapter passes them as flags again: it reads
// `runtime.options.virtualenv` from the Pulumi.yaml of the directory the CLI starts it in (the
// program's root), or from its PulumiPolicy.yaml when there is no Pulumi.yaml (`pulumi install`
// in a policy pack), and starts the real host with `-virtualenv` and `-root`. The v3.259 CLI also
// runs a Python policy pack through the host's RunPlugin call, of which that host knows nothing:
// the adapter forwards every call to the real host but runs those policy packs itself, with the
// sdk's pulumi-analyzer-policy-python script beside it (see ../../internal/adapter). Current
// hosts (in the pulumi/pulumi-python images users run) need nothing of the kind.
package main

import (
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/pulumi-operator-rs/test-tools/langhosts/internal/adapter"
)

type project struct {
	Runtime yaml.Node `yaml:"runtime"`
}

// virtualenv is runtime.options.virtualenv of the project file in dir, or, when dir has none, of
// its policy pack file, if any.
func virtualenv(dir string) string {
	for _, name := range []string{"Pulumi.yaml", "Pulumi.yml", "Pulumi.json", "PulumiPolicy.yaml", "PulumiPolicy.yml", "PulumiPolicy.json"} {
		text, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var p project
		if yaml.Unmarshal(text, &p) != nil {
			return ""
		}
		var runtime struct {
			Options struct {
				Virtualenv string `yaml:"virtualenv"`
			} `yaml:"options"`
		}
		if p.Runtime.Kind == yaml.MappingNode && p.Runtime.Decode(&runtime) == nil {
			return runtime.Options.Virtualenv
		}
		return ""
	}
	return ""
}

func main() {
	adapter.Main(adapter.Config{
		Name:   "pulumi-language-python",
		Host:   "pulumi-language-python-host",
		Script: "pulumi-analyzer-policy-python",
		HostArgs: func(root string) []string {
			args := []string{"-root=" + root}
			if venv := virtualenv(root); venv != "" {
				args = append(args, "-virtualenv="+venv)
			}
			return args
		},
	})
}
