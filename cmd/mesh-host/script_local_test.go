package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/internal/statusview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The operator's side of the script's mesh, for scripts that drive a
// host service against it: meshctl's own client code, not a copy.

// scriptClient is an operator's client of the script's mesh, declaring as
// alice@ops.
func scriptClient(ts *testscript.TestScript) *client.Client {
	v, ok := meshes.Load(ts.Getenv("WORK"))
	if !ok {
		ts.Fatalf("start a mesh first")
	}
	m := v.(*scriptMesh)
	nc, err := client.Dial(m.a, []string{m.url})
	ts.Check(err)
	ts.Defer(nc.Close)
	c, err := client.NewClient(nc, m.a.Mesh)
	ts.Check(err)
	c.Key, c.Operator = m.a.DeclarationKey(), "alice@ops"
	return c
}

// meshdeclare NODE FILE [--reclaim] declares FILE for NODE as `meshctl
// declare --wait 30s` does, printing what it prints; a refusal is
// printed to stderr and fails the command.
func cmdMeshDeclare(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || len(args) > 3 || len(args) == 3 && args[2] != "--reclaim" {
		ts.Fatalf("usage: meshdeclare NODE FILE [--reclaim]")
	}
	c := scriptClient(ts)
	d := readScriptDeclaration(ts, args[1])
	err := c.Declare(context.Background(), ts.Stdout(), args[0], d, client.DeclareOptions{Wait: 30 * time.Second, Reclaim: len(args) == 3})
	if err != nil {
		fmt.Fprintln(ts.Stderr(), err)
	}
	if (err != nil) != neg {
		ts.Fatalf("meshdeclare: %v", err)
	}
}

// forgereclaim NODE FILE pushes FILE to NODE signed by the mesh as an
// ordinary declaration, then marked a reclaim after signing, as a broker
// or another node could; it prints the node's ack.
func cmdForgeReclaim(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: forgereclaim NODE FILE")
	}
	c := scriptClient(ts)
	push, err := client.Push(readScriptDeclaration(ts, args[1]), c.Mesh, args[0])
	ts.Check(err)
	push.Operator = c.Operator
	ts.Check(push.Sign(c.Key))
	push.Reclaim = true
	m, err := c.Conn.Request(linkproto.DeclarationSubject(c.Mesh, args[0]), linkproto.Marshal(push), 10*time.Second)
	ts.Check(err)
	var ack linkproto.Ack
	ts.Check(json.Unmarshal(m.Data, &ack))
	fmt.Fprintf(ts.Stdout(), "accepted=%v reason=%s\n", ack.Accepted, ack.Reason)
}

// meshnodes WANT prints `meshctl nodes` once its table holds WANT, a
// substring, polling for up to 30 s: a heartbeat is on its way.
func cmdMeshNodes(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: meshnodes WANT")
	}
	c := scriptClient(ts)
	ts.Stdout().Write([]byte(polled(ts, args[0], func() string {
		nodes, err := c.Nodes(context.Background())
		ts.Check(err)
		var b strings.Builder
		ts.Check(fleetview.PrintNodes(&b, nodes, time.Now(), false))
		return b.String()
	})))
}

// meshstatus NODE WANT prints `meshctl status NODE`'s state, the node's
// latest report through the renderer both ends use, once it holds WANT,
// polling for up to 30 s.
func cmdMeshStatus(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: meshstatus NODE WANT")
	}
	c := scriptClient(ts)
	ts.Stdout().Write([]byte(polled(ts, args[1], func() string {
		rep, err := c.Report(context.Background(), args[0])
		if err != nil {
			return err.Error()
		}
		var b strings.Builder
		ts.Check(statusview.Print(&b, rep.State, statusview.Options{}))
		return b.String()
	})))
}

// polled is what get returns once it holds want, or fails the script
// after 30 s showing the last.
func polled(ts *testscript.TestScript, want string, get func() string) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := get()
		if strings.Contains(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no %q within 30 s; last:\n%s", want, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readScriptDeclaration(ts *testscript.TestScript, name string) *declaration.Declaration {
	f, err := os.Open(ts.MkAbs(name))
	ts.Check(err)
	defer f.Close()
	d, err := declaration.Read(name, f)
	ts.Check(err)
	return d
}
