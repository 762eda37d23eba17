// pulumi-language-python: a TEST ADAPTER (never shipped) in front of the real Python language
// host, pulumi-language-python-host beside it, built from github.com/pulumi/pulumi/sdk/v3
// v3.68.0: the newest Python host the Go module proxy serves (the host's own module is refused).
// That host reads a project's runtime options (`virtualenv`) only from its command-line flags,
// which the Pulumi CLI of that time passed; the v3.259 CLI sends them in a ProgramInfo message
// the old host does not know, so the old host would create the virtualenv in the project root
// and run the system python. This adapter passes them as flags again: it reads
// `runtime.options.virtualenv` from the Pulumi.yaml of the directory the CLI starts it in (the
// program's root) and execs the real host with `-virtualenv` and `-root`. Current hosts (in the
// pulumi/pulumi-python images users run) need nothing of the kind.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"gopkg.in/yaml.v3"
)

type project struct {
	Runtime yaml.Node `yaml:"runtime"`
}

// virtualenv is runtime.options.virtualenv of the project file in dir, if any.
func virtualenv(dir string) string {
	for _, name := range []string{"Pulumi.yaml", "Pulumi.yml", "Pulumi.json"} {
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
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-language-python adapter:", err)
		os.Exit(1)
	}
	host := filepath.Join(filepath.Dir(self), "pulumi-language-python-host")
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-language-python adapter:", err)
		os.Exit(1)
	}
	args := []string{host, "-root=" + root}
	if venv := virtualenv(root); venv != "" {
		args = append(args, "-virtualenv="+venv)
	}
	args = append(args, os.Args[1:]...)
	if err := syscall.Exec(host, args, os.Environ()); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-language-python adapter: cannot run", host+":", err)
		os.Exit(1)
	}
}
