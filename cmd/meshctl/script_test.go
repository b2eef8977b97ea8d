package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/script")

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"meshctl": func() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts specifies the CLI: testdata/script/*.txtar, named by
// subcommand first. Refresh their golden output with `go test -update`.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: *update,
		Setup: func(e *testscript.Env) error {
			e.Setenv("MESHCTL_DATA", e.WorkDir+"/data")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitserve": cmdWaitServe,
		},
	})
}

// waitserve waits until a `meshctl serve` started in the background answers
// `meshctl nodes`: its broker listens and its streams are in place.
func cmdWaitServe(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 0 {
		ts.Fatalf("usage: waitserve")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out bytes.Buffer
		if runCLI(context.Background(), []string{"--data", ts.Getenv("MESHCTL_DATA"), "nodes"}, &out, &out, nil) == command.ExitOK {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("meshctl serve does not answer: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
