package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
)

// history publishes a node's journal as the node sends it upward: a
// declaration, the reconcile it caused, an outcome; then drift and its
// repair; then a host start with no cause.
func history(t *testing.T, n *node) []event.Record {
	t.Helper()
	return historyDeclaring(t, n, "sha256:m1")
}

// historyDeclaring is history with its declaration declaring
// file:/etc/motd at spec (the drift's repair restores sha256:m1).
func historyDeclaring(t *testing.T, n *node, spec string) []event.Record {
	t.Helper()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	records := []event.Record{
		event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{Revision: 1, Digest: "sha256:ab", Source: "push",
			Resources: []event.DeclaredResource{{ID: "file:/etc/motd", SpecDigest: spec}}}),
		event.New(event.ReconcileStarted, 1, "", event.ReconcileStartedPayload{}),
		event.New(event.ResourceApplied, 2, "file:/etc/motd", event.ResourceAppliedPayload{}),
		event.New(event.DriftObserved, 0, "file:/etc/motd", event.DriftObservedPayload{Differs: []string{"content"}, Wanted: "sha256:m1", Seen: "sha256:ee"}),
		event.New(event.ReconcileStarted, 4, "", event.ReconcileStartedPayload{}),
		event.New(event.ResourceApplied, 5, "file:/etc/motd", event.ResourceAppliedPayload{}),
		event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: "v1"}),
		event.New(event.ResourceApplied, 99, "file:/etc/hosts", event.ResourceAppliedPayload{}),
	}
	for i := range records {
		records[i].Seq = uint64(i + 1)
		records[i].Time = at.Add(time.Duration(i) * time.Second)
		n.publishEvent(t, records[i])
	}
	// Sent twice, stored once.
	n.publishEvent(t, records[0])
	return records
}

func TestJournal(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	records := history(t, b.node("a"))
	history(t, b.node("b")) // another node's records are not a's
	c := b.client(time.Now())

	var got []uint64
	if err := c.Records(ctx, "a", 1, func(r event.Record) error { got = append(got, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(records) {
		t.Fatalf("records %v, want 1..%d once each", got, len(records))
	}
	for i, seq := range got {
		if seq != uint64(i+1) {
			t.Fatalf("records %v, want 1..%d in order", got, len(records))
		}
	}

	var out bytes.Buffer
	if err := printJournal(ctx, &out, c, "a", 7, false); err != nil {
		t.Fatal(err)
	}
	want := `    SEQ  TIME                  KIND                   CAUSE  RESOURCE                      DETAIL
      7  2026-11-29T10:00:06Z  host.started               -  -                             version=v1 pid=0
      8  2026-11-29T10:00:07Z  resource.applied          99  file:/etc/hosts               action=""
`
	if out.String() != want {
		t.Errorf("journal --since 7:\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	if err := printJournal(ctx, &out, c, "a", 0, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(records) {
		t.Fatalf("%d JSON lines, want %d", len(lines), len(records))
	}
	var first event.Record
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Kind != event.DeclarationReceived || !first.Time.Equal(records[0].Time) {
		t.Errorf("first JSON line %s (%v)", lines[0], err)
	}

	out.Reset()
	if err := printJournal(ctx, &out, c, "never-heard", 0, false); err != nil || out.Len() != 0 {
		t.Errorf("journal of a node with no records: %q, %v", out.String(), err)
	}
}

func TestJournalWhy(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	history(t, b.node("a"))
	c := b.client(time.Now())

	why, err := c.Why(ctx, "a", "file:/etc/motd")
	if err != nil {
		t.Fatal(err)
	}
	heldBy := why.HeldBy
	var seqs []uint64
	for _, r := range why.Chain {
		seqs = append(seqs, r.Seq)
	}
	if want := []uint64{6, 5, 4}; !slices.Equal(seqs, want) {
		t.Errorf("why file:/etc/motd: %v, want %v (newest first, down to the drift)", seqs, want)
	}
	// The repair restored what the declaration in force declares.
	if heldBy == nil || heldBy.Seq != 1 {
		t.Errorf("why file:/etc/motd: held by %v, want the declaration #1", heldBy)
	}

	var out bytes.Buffer
	if err := printWhy(ctx, &out, c, "a", "file:/etc/motd", false); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "file:/etc/motd is as it is because of, newest first:\n    SEQ") || strings.Count(out.String(), "\n") != 7 ||
		!strings.Contains(out.String(), "restored to what the declaration in force declares:\n      1  ") {
		t.Errorf("why output:\n%s", out.String())
	}

	// A declaration that declares it otherwise does not hold it.
	historyDeclaring(t, b.node("c"), "sha256:other")
	whyC, err := c.Why(ctx, "c", "file:/etc/motd")
	if err != nil || whyC.HeldBy != nil {
		t.Errorf("why, the declaration declaring another spec: held by %v (err %v), want none", whyC.HeldBy, err)
	}
	if whyC.DroppedBy != nil || why.DroppedBy != nil {
		t.Errorf("why, still declared: dropped by %v, %v; want none", whyC.DroppedBy, why.DroppedBy)
	}

	// A later declaration that leaves it out (a revert) dropped it: the
	// story ends there, not at the resource's last record; a resource it
	// still declares was not dropped.
	d := b.node("d")
	history(t, d)
	revert := event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{Revision: 2, Digest: "sha256:cd", Source: "push",
		Operator: "alice reverting rollout r1", Resources: []event.DeclaredResource{{ID: "file:/etc/hosts", SpecDigest: "sha256:h1"}}})
	revert.Seq, revert.Time = 9, time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	d.publishEvent(t, revert)
	if why, err := c.Why(ctx, "d", "file:/etc/motd"); err != nil || why.DroppedBy == nil || why.DroppedBy.Seq != 9 || len(why.Chain) != 3 {
		t.Errorf("why of a resource the revert left out: dropped by %v, chain of %d (err %v); want #9 and the chain of 3", why.DroppedBy, len(why.Chain), err)
	}
	if why, err := c.Why(ctx, "d", "file:/etc/hosts"); err != nil || why.DroppedBy != nil {
		t.Errorf("why of a resource the revert declares: dropped by %v (err %v), want none", why.DroppedBy, err)
	}
	out.Reset()
	if err := printWhy(ctx, &out, c, "d", "file:/etc/motd", false); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "file:/etc/motd is no longer declared, since this declaration") || !strings.Contains(out.String(), "alice reverting rollout r1") {
		t.Errorf("why output of a dropped resource:\n%s", out.String())
	}

	// A cause the stream does not hold is said so.
	out.Reset()
	if err := printWhy(ctx, &out, c, "a", "file:/etc/hosts", false); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), "(#8 was caused by #99, which the events stream does not hold)\n") {
		t.Errorf("why output:\n%s", out.String())
	}

	if _, err := c.Why(ctx, "a", "file:/nowhere"); !errors.Is(err, ErrNoRecord) {
		t.Errorf("why of an unknown resource: %v, want ErrNoRecord", err)
	}
}
