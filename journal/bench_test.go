package journal_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// The journal issue's figures. Every benchmark folds the real projection in
// the append's transaction and fsyncs each commit, as the host does.

func benchJournal(b *testing.B) *journal.Journal {
	b.Helper()
	j, err := journal.Open(filepath.Join(b.TempDir(), "journal.db"), journal.Options{Fold: new(projector.Stored).Fold})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { j.Close() })
	return j
}

func outcome(cause uint64, i int) event.Record {
	return event.New(event.ResourceApplied, cause, fmt.Sprintf("file:/etc/app/conf.d/%04d.conf", i%1000),
		event.ResourceAppliedPayload{Action: event.ActionUpdate, SpecDigest: fmt.Sprintf("sha256:%064x", i)})
}

// BenchmarkAppendBatched: a reconcile's 1,000 outcomes in one Append, one
// fsync. Target ≥ 100,000 records/s.
func BenchmarkAppendBatched(b *testing.B) {
	j := benchJournal(b)
	start, err := j.Append(event.New(event.ReconcileStarted, 0, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed}))
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]event.Record, 1000)
	for i := range batch {
		batch[i] = outcome(start[0].Seq, i)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := j.Append(batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(batch)*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendSingle: one record per Append, so one fsync each.
func BenchmarkAppendSingle(b *testing.B) {
	j := benchJournal(b)
	i := 0
	for b.Loop() {
		if _, err := j.Append(outcome(0, i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkQuietDay: how much a quiet day (144 timer reconciles, one every
// ten minutes, over 1,000 owned resources that never change) adds to the
// journal. Each reconcile appends one reconcile.completed record, as the
// issue requires. It reports the first day and the average of the six days
// after it, by the blocks the file occupies on disk (bbolt grows the file
// ahead of use, sparsely) and by the pages bbolt uses in it. Target
// ≤ 64 KiB a day.
func BenchmarkQuietDay(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "journal.db")
		j, err := journal.Open(path, journal.Options{Fold: new(projector.Stored).Fold})
		if err != nil {
			b.Fatal(err)
		}
		start, err := j.Append(event.New(event.ReconcileStarted, 0, "", event.ReconcileStartedPayload{Trigger: event.TriggerStart}))
		if err != nil {
			b.Fatal(err)
		}
		batch := make([]event.Record, 1000)
		for i := range batch {
			batch[i] = outcome(start[0].Seq, i)
		}
		if _, err := j.Append(batch...); err != nil {
			b.Fatal(err)
		}
		t := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		var file, used []int64 // after each day
		measure := func() {
			in, err := j.Info()
			if err != nil {
				b.Fatal(err)
			}
			file, used = append(file, diskUsage(b, path)), append(used, in.Size)
		}
		measure()
		b.StartTimer()
		for range 7 {
			for range 144 {
				t = t.Add(10 * time.Minute)
				if _, err := j.Append(event.New(event.ReconcileCompleted, 0, "", event.ReconcileCompletedPayload{
					Trigger: event.TriggerTimer, Revision: 1, Result: event.ResultConverged, Started: t, Unchanged: 1000, Quiet: true,
				})); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			measure()
			b.StartTimer()
		}
		b.StopTimer()
		j.Close()
		b.ReportMetric(float64(used[1]-used[0]), "used-bytes/day1")
		b.ReportMetric(float64(used[7]-used[1])/6, "used-bytes/day")
		b.ReportMetric(float64(file[7]-file[1])/6, "disk-bytes/day")
		b.StartTimer()
	}
}

// diskUsage is the space the file occupies on disk, as du counts it.
func diskUsage(b *testing.B, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// BenchmarkCompact: compaction of a journal of 300,000 outcome records whose
// oldest 200,000 are past the window: how long it takes, and what it gives
// back to the filesystem (bbolt files never shrink by themselves).
func BenchmarkCompact(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		path := filepath.Join(b.TempDir(), "journal.db")
		j, err := journal.Open(path, journal.Options{Fold: new(projector.Stored).Fold, Now: func() time.Time { return t }})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < 300; i++ {
			batch := make([]event.Record, 1000)
			for k := range batch {
				batch[k] = outcome(0, i*1000+k)
			}
			if _, err := j.Append(batch...); err != nil {
				b.Fatal(err)
			}
			t = t.Add(time.Hour)
		}
		before := diskUsage(b, path)
		t = t.Add(90 * 24 * time.Hour) // all but the newest KeepLast are old
		b.StartTimer()
		res, err := j.Compact(journal.CompactOptions{KeepLast: 100_000})
		b.StopTimer()
		if err != nil || res.Dropped != 200_000 {
			b.Fatalf("compact dropped %d: %v", res.Dropped, err)
		}
		after := diskUsage(b, path)
		j.Close()
		b.ReportMetric(float64(before), "disk-bytes-before")
		b.ReportMetric(float64(after), "disk-bytes-after")
		b.StartTimer()
	}
}
