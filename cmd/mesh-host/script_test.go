package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"math/big"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/script")

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"mesh-host": func() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) },
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
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"seed":              cmdSeed,
			"flipbyte":          cmdFlipByte,
			"truncate":          cmdTruncate,
			"tamper-projection": cmdTamperProjection,
			"waitsock":          cmdWaitSock,
			"mktoken":           cmdMkToken,
			"mode":              cmdMode,
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

// mktoken MESH NODE URL makes an enrolment token, as `meshctl enrol` prints
// it, with placeholder credentials and a CA of its own: it sets $TOKEN and
// writes token.txt.
func cmdMkToken(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: mktoken MESH NODE URL")
	}
	creds := "-----BEGIN NATS USER JWT-----\neyJ0ZXN0IjoidG9rZW4ifQ\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\nSUAPLACEHOLDER\n------END USER NKEY SEED------\n"
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ts.Check(err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	ts.Check(err)
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	tok := linkproto.Token{Protocol: linkproto.ProtocolVersion, Mesh: args[0], Node: args[1], URLs: []string{args[2]}, Creds: creds, CA: ca,
		SigningKey: testSigningKeyPub}.Encode()
	ts.Setenv("TOKEN", tok)
	ts.Check(os.WriteFile(ts.MkAbs("token.txt"), []byte(tok+"\n"), 0o600))
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
