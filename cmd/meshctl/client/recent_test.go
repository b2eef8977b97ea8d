package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
)

func TestRecentRecordsReadsTheLatestOfEveryNode(t *testing.T) {
	b := newBed(t)
	c := b.client(time.Now())
	ctx := context.Background()
	web1, web2 := b.node("web-1"), b.node("web-2")
	start := time.Now().Add(-time.Minute)
	for seq := uint64(1); seq <= 3; seq++ {
		for _, n := range []*node{web1, web2} {
			r := event.New(event.DriftObserved, 0, "file:/etc/motd", event.DriftObservedPayload{Differs: []string{"content"}})
			r.Seq, r.Time = seq, time.Now()
			n.publishEvent(t, r)
		}
	}
	read := func(since time.Time, limit int) ([]string, Recent) {
		t.Helper()
		var got []string
		rec, err := c.RecentRecords(ctx, since, limit, func(node string, r event.Record) {
			got = append(got, fmt.Sprintf("%s#%d", node, r.Seq))
		})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Read != len(got) {
			t.Errorf("Read %d, handed %d", rec.Read, len(got))
		}
		return got, rec
	}
	if got, rec := read(start, 100); fmt.Sprint(got) != "[web-1#1 web-2#1 web-1#2 web-2#2 web-1#3 web-2#3]" || rec.Capped || rec.From.IsZero() {
		t.Errorf("since a minute ago: %v %+v", got, rec)
	}
	// Over the limit: the latest ones, and it says so.
	if got, rec := read(start, 2); fmt.Sprint(got) != "[web-1#3 web-2#3]" || !rec.Capped {
		t.Errorf("at most 2: %v %+v, want the latest two, capped", got, rec)
	}
	if got, _ := read(time.Now().Add(time.Hour), 100); len(got) != 0 {
		t.Errorf("since an hour ahead: %v", got)
	}
}
