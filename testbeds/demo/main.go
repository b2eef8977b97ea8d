// Command demo brings up a single-machine mesh for a person to try (the
// work is testbeds/demo/sandbox's; see there):
//
//	go run ./testbeds/demo            # up, in ./sandbox
//	go run ./testbeds/demo down       # stop both services
//	go run ./testbeds/demo reset      # stop them and remove ./sandbox
//
// This is only its launcher: it says that it is building, builds the
// demo with a line of progress every few seconds, and runs it with the
// same arguments. `go run` compiles a program before the program can say
// a word, and the demo itself links the declaration parser, YAML, the
// packaging and every dependency of theirs: on an empty build cache that
// was half a minute of silence. The launcher imports the standard library
// and buildprogress alone (a test keeps it so), which compiles in a few
// seconds.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"

	"github.com/mesh-host/mesh-host/testbeds/buildprogress"
)

// demoPackage is what the launcher builds and runs.
const demoPackage = "github.com/mesh-host/mesh-host/testbeds/demo/sandbox"

func main() {
	os.Exit(launch(os.Args[1:], os.Stdout, os.Stderr))
}

// launch builds the demo into a directory of its own, runs it with args,
// and returns its exit code.
func launch(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stdout, "building the demo (the first build compiles every dependency: minutes on a small machine)...")
	tmp, err := os.MkdirTemp("", "mesh-host-demo-")
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "demo")
	p := buildprogress.New(stdout)
	build := exec.Command("go", "build", "-v", "-o", bin, demoPackage)
	build.Stdout, build.Stderr = &p.Out, p
	if err := build.Run(); err != nil {
		fmt.Fprintf(stderr, "demo: go build %s: %v\n%s", demoPackage, err, p.Out.String())
		return 1
	}
	// Ctrl-C reaches the demo as well (one process group): it decides
	// what an interrupted up leaves, and the launcher waits for it to say
	// so, removing its build only then. Notify rather than Ignore: an
	// ignored signal would stay ignored in the demo and the services it
	// starts.
	signal.Notify(make(chan os.Signal, 1), os.Interrupt)
	demo := exec.Command(bin, args...)
	demo.Stdin, demo.Stdout, demo.Stderr = os.Stdin, stdout, stderr
	err = demo.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}
