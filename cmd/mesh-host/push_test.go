package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// newTestLinkHost is the service's link host over a new journal, admitting
// as serve does (env.admissible): what the journal tests push through. The
// link host's own tests are in package service.
func newTestLinkHost(t *testing.T) (*service.LinkHost, *journal.Journal) {
	t.Helper()
	j, err := hostjournal.Open(t.TempDir() + "/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	e := &env{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, now: time.Now,
		cli: &cli{OwnUnit: "mesh-host.service", Root: t.TempDir(), Parallel: 2}}
	return service.NewLinkHost(&service.Held{Journal: j}, e.admissible), j
}

// The mesh's declaration key in these tests (a fixed one, so that golden
// files can name it).
const (
	testSigningKeySeed = "SNAFUKXKTKNTW4XZM76AGTSNS6ZDDPDUIWJYLVD7YNXLBVJTTMO6LV65CM"
	testSigningKeyPub  = "NBJMG7EVNEJ7C57O2KAFOHOG5BJED3YA5DKTA46N3YCCGR7M4CLGGN7F"
)

// push is revision rev of document as the link hands it to the host:
// signed by the mesh, by operator tester.
func push(rev uint64, document string) *linkproto.Declaration {
	d := &linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "lab", Node: "web-1", Revision: rev, Document: json.RawMessage(document), Operator: "tester"}
	key, err := nkeys.FromSeed([]byte(testSigningKeySeed))
	if err != nil {
		panic(err)
	}
	if err := d.Sign(key); err != nil {
		panic(err)
	}
	return d
}

func doc(rev uint64, motd string) string {
	return fmt.Sprintf(`{"mesh":"lab","node":"web-1","revision":%d,"resources":[{"file":{"path":"/etc/motd","content":%q}}]}`, rev, motd)
}

func lastRecord(t *testing.T, j *journal.Journal) event.Record {
	t.Helper()
	in, err := j.Info()
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := j.Get(in.Head)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
