package journal

import (
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/journal/event"
)

// TestLatestOfKind: the newest record of a kind, found across epochs of
// the by-kind index, and none for a kind never appended or one whose name
// another kind's begins with.
func TestLatestOfKind(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, ok, err := j.LatestOfKind("daily.kind"); ok || err != nil {
		t.Fatalf("an empty journal: %v %v", ok, err)
	}
	var want uint64
	for i := range 1000 {
		kind := event.Kind("busy.kind")
		if i == 10 || i == 300 || i == 301 {
			kind = "daily.kind"
		}
		recs, err := j.Append(event.New(kind, 0, "", map[string]int{"i": i}))
		if err != nil {
			t.Fatal(err)
		}
		if kind == "daily.kind" {
			want = recs[0].Seq
		}
	}
	r, ok, err := j.LatestOfKind("daily.kind")
	if err != nil || !ok || r.Seq != want || r.Kind != "daily.kind" {
		t.Errorf("LatestOfKind(daily.kind) = #%d %v %v, want #%d", r.Seq, ok, err, want)
	}
	for _, k := range []event.Kind{"daily", "never.kind", "daily.kin"} {
		if r, ok, err := j.LatestOfKind(k); ok || err != nil {
			t.Errorf("LatestOfKind(%s) = #%d %v %v, want none", k, r.Seq, ok, err)
		}
	}
}
