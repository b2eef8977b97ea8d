package nodeservice

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/linkproto"
)

// BenchmarkEventsThrough100k: one node with 100k records in the events
// stream, one subject each. It reports what the broker holds for them (the
// Go heap of the process, the embedded server's included, grown by the
// records) and times eventsThrough, as at a hello (no hint: the last of the
// node's wildcard, then one literal read) and as at a sync (the node's
// last sent record as the hint: two literal reads).
func BenchmarkEventsThrough100k(b *testing.B) {
	const records = 100_000
	bed := newBed(b)
	ctx := context.Background()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	body := []byte(`{"seq":1,"time":"2026-12-02T00:00:00Z","kind":"drift.observed","resource":"file:/etc/motd","payload":{}}`)
	for seq := uint64(1); seq <= records; seq++ {
		if err := bed.nc.Publish(linkproto.EventSubject(testMesh, "a", seq), body); err != nil {
			b.Fatal(err)
		}
	}
	events, err := bed.js.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		b.Fatal(err)
	}
	var stored uint64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := events.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Msgs == records {
			stored = info.State.Bytes
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the stream holds %d of %d records", info.State.Msgs, records)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapInuse) - int64(before.HeapInuse)
	for _, hint := range []uint64{0, records} {
		b.Run(fmt.Sprintf("sent=%d", hint), func(b *testing.B) {
			for b.Loop() {
				through, err := eventsThrough(ctx, events, testMesh, "a", hint)
				if err != nil || through != records {
					b.Fatal(fmt.Sprint(through, err))
				}
			}
			b.ReportMetric(float64(stored)/records, "stored-B/record")
			b.ReportMetric(float64(heap)/records, "heap-B/record")
		})
	}
}
