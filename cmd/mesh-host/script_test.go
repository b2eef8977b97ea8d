package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/script")

func TestMain(m *testing.M) {
	testscript.Main(removingAfter{m}, map[string]func(){
		"mesh-host": func() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) },
		// The beds' many-hosts runner: fleet_test.go.
		"mesh-host-fleet": func() { os.Exit(fleetMain(os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts specifies the CLI: testdata/script/*.txtar, named by
// subcommand first. Refresh their golden output with `go test -update`.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "testdata/script",
		UpdateScripts: *update,
		Setup: func(e *testscript.Env) error {
			e.Setenv("MESH_HOST_STATE_DIR", e.WorkDir+"/state")
			// Every script may seed the shared history.
			history, err := os.ReadFile("testdata/history.jsonl")
			if err != nil {
				return err
			}
			return os.WriteFile(e.WorkDir+"/history.jsonl", history, 0o600)
		},
		// [root]: the script runs as root (account files, chown).
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"seed":              cmdSeed,
			"flipbyte":          cmdFlipByte,
			"truncate":          cmdTruncate,
			"tamper-projection": cmdTamperProjection,
			"flip-projection":   cmdFlipProjection,
			"waitsock":          cmdWaitSock,
			"mesh":              cmdMesh,
			"mktoken":           cmdMkToken,
			"edittoken":         cmdEditToken,
			"mode":              cmdMode,
			"meshdeclare":       cmdMeshDeclare,
			"forgereclaim":      cmdForgeReclaim,
			"meshnodes":         cmdMeshNodes,
			"meshstatus":        cmdMeshStatus,
		},
	})
}

// seed JOURNAL FILE appends the records in FILE, one JSON record a line, each
// stamped with its own "time", so golden output does not depend on the clock.
func cmdSeed(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: seed JOURNAL FILE")
	}
	var now time.Time
	j, err := journal.Open(ts.MkAbs(args[0]), journal.Options{
		Fold: new(projector.Stored).Fold,
		Now:  func() time.Time { return now },
	})
	ts.Check(err)
	defer j.Close()
	data := ts.ReadFile(args[1])
	sc := bufio.NewScanner(bytes.NewReader([]byte(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var r event.Record
		ts.Check(json.Unmarshal(line, &r))
		now = r.Time
		_, err := j.Append(r)
		if neg {
			if err == nil {
				ts.Fatalf("seed: append of %s succeeded", line)
			}
			ts.Logf("seed: %v", err)
			return
		}
		ts.Check(err)
	}
	ts.Check(sc.Err())
}

// flipbyte FILE NEEDLE flips the bits of the first byte of every occurrence
// of NEEDLE in FILE (bbolt's copy-on-write leaves stale copies in free pages,
// so the first need not be the live one): damage bbolt itself cannot see.
func cmdFlipByte(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: flipbyte FILE NEEDLE")
	}
	path := ts.MkAbs(args[0])
	b, err := os.ReadFile(path)
	ts.Check(err)
	needle := []byte(args[1])
	n := 0
	for i := bytes.Index(b, needle); i >= 0; i = bytes.Index(b[i+1:], needle) + i + 1 {
		b[i] ^= 0xff
		n++
		if bytes.Index(b[i+1:], needle) < 0 {
			break
		}
	}
	if n == 0 {
		ts.Fatalf("%q not found in %s", args[1], path)
	}
	ts.Check(os.WriteFile(path, b, 0o600))
}

// truncate FILE SIZE cuts FILE to SIZE bytes.
func cmdTruncate(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: truncate FILE SIZE")
	}
	n, err := strconv.ParseInt(args[1], 10, 64)
	ts.Check(err)
	ts.Check(os.Truncate(ts.MkAbs(args[0]), n))
}

// tamper-projection JOURNAL RESOURCE removes RESOURCE from the stored
// projection, behind the journal's back, so replay --verify has something to
// find.
func cmdTamperProjection(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: tamper-projection JOURNAL RESOURCE")
	}
	db, err := bolt.Open(ts.MkAbs(args[0]), 0o600, &bolt.Options{Timeout: time.Second})
	ts.Check(err)
	defer db.Close()
	ts.Check(db.Update(func(tx *bolt.Tx) error {
		proj := tx.Bucket([]byte("projection"))
		key := []byte("owned/" + args[1])
		if proj.Get(key) == nil {
			ts.Fatalf("%s is not owned", args[1])
		}
		return proj.Delete(key)
	}))
}

// flip-projection JOURNAL KEY flips a bit in the middle of the stored
// projection's value under KEY, behind the journal's back: damage only its
// checksum can find.
func cmdFlipProjection(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: flip-projection JOURNAL KEY")
	}
	db, err := bolt.Open(ts.MkAbs(args[0]), 0o600, &bolt.Options{Timeout: time.Second})
	ts.Check(err)
	defer db.Close()
	ts.Check(db.Update(func(tx *bolt.Tx) error {
		proj := tx.Bucket([]byte("projection"))
		v := bytes.Clone(proj.Get([]byte(args[1])))
		if len(v) == 0 {
			ts.Fatalf("the projection has no %s", args[1])
		}
		v[len(v)/2] ^= 0x04
		return proj.Put([]byte(args[1]), v)
	}))
}

// waitsock PATH waits, up to 10 s, until a service answers on PATH.
func cmdWaitSock(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: waitsock PATH")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", ts.MkAbs(args[0]))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("nothing answers on %s: %v", args[0], err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// meshes are the control planes scripts started, by work directory.
var meshes sync.Map // string → *scriptMesh

type scriptMesh struct {
	a      *authority.Authority
	url    string
	broker *broker.Broker
	stop   func()
}

// mesh MESH starts a control plane for the script: an authority in
// $WORK/control, its embedded broker on a random port and a control
// service (so tokens can be redeemed). It sets $NATS_URL and $SIGNING_KEY.
// mesh stop stops it, leaving a broker address nothing answers on.
func cmdMesh(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: mesh MESH|stop")
	}
	work := ts.Getenv("WORK")
	if args[0] == "stop" {
		m, ok := meshes.LoadAndDelete(work)
		if !ok {
			ts.Fatalf("no mesh started")
		}
		m.(*scriptMesh).stop()
		return
	}
	a, _, err := authority.Init(filepath.Join(work, "control"), args[0])
	ts.Check(err)
	b, err := broker.New(a, broker.Config{Listen: "127.0.0.1:0"})
	ts.Check(err)
	ts.Check(b.Start())
	nc, err := client.Dial(a, []string{b.URL()})
	ts.Check(err)
	sys, err := nodeservice.DialSystem(a, []string{b.URL()}, false, nil)
	ts.Check(err)
	ctx, cancel := context.WithCancel(context.Background())
	svc := &nodeservice.Service{Conn: nc, Mesh: a.Mesh, Key: a.DeclarationKey(), Log: slog.New(slog.DiscardHandler),
		Issuer: &nodeservice.Accounts{A: a, Sys: sys, Now: time.Now}}
	var runErr error
	done := make(chan struct{}) // closed when Run returns, with runErr
	ready := make(chan struct{})
	svc.Ready = func() { close(ready) }
	go func() { runErr = svc.Run(ctx); close(done) }()
	var once sync.Once
	m := &scriptMesh{a: a, url: b.URL(), broker: b, stop: func() {
		once.Do(func() {
			cancel()
			<-done
			nc.Close()
			sys.Close()
			b.Close()
		})
	}}
	meshes.Store(work, m)
	ts.Defer(m.stop)
	ts.Check(svc.Ensure(ctx))
	// A command right after (an enrolment) must find it answering.
	select {
	case <-ready:
	case <-done:
		ts.Fatalf("the control service ended: %v", runErr)
	case <-time.After(30 * time.Second):
		ts.Fatalf("the control service did not subscribe within 30s")
	}
	ts.Setenv("NATS_URL", b.URL())
	ts.Setenv("SIGNING_KEY", a.SigningKey())
}

// mktoken NODE [TTL] issues an enrolment token of the script's mesh, as
// `meshctl enrol` prints it: it sets $TOKEN and writes token.txt. A
// negative TTL makes a token that expired that long ago.
func cmdMkToken(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: mktoken NODE [TTL]")
	}
	v, ok := meshes.Load(ts.Getenv("WORK"))
	if !ok {
		ts.Fatalf("mktoken: start a mesh first")
	}
	m := v.(*scriptMesh)
	ttl, now := time.Hour, time.Now()
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		ts.Check(err)
		if d < 0 {
			now, d = now.Add(d-time.Hour), time.Hour
		}
		ttl = d
	}
	tok, _, err := m.a.IssueToken(args[0], []string{m.url}, now, ttl)
	ts.Check(err)
	ts.Setenv("TOKEN", tok)
	ts.Check(os.WriteFile(ts.MkAbs("token.txt"), []byte(tok+"\n"), 0o600))
}

// edittoken FIELD VALUE changes a string field of $TOKEN and keeps its
// signature, as someone editing a token would.
func cmdEditToken(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: edittoken FIELD VALUE")
	}
	body, sig, _ := strings.Cut(strings.TrimPrefix(ts.Getenv("TOKEN"), "meshtoken2."), ".")
	raw, err := base64.RawURLEncoding.DecodeString(body)
	ts.Check(err)
	var m map[string]any
	ts.Check(json.Unmarshal(raw, &m))
	m[args[0]] = args[1]
	raw, err = json.Marshal(m)
	ts.Check(err)
	ts.Setenv("TOKEN", "meshtoken2."+base64.RawURLEncoding.EncodeToString(raw)+"."+sig)
}

// mode PATH PERM checks that PATH's permission bits are PERM (octal).
func cmdMode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: mode PATH PERM")
	}
	want, err := strconv.ParseUint(args[1], 8, 32)
	ts.Check(err)
	fi, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	if got := uint64(fi.Mode().Perm()); (got == want) == neg {
		ts.Fatalf("%s has mode %04o, want %s%04o", args[0], got, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}
