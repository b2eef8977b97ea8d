package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// The figures the journal issue asks for, end to end through the code the
// commands run: replay and --why on a journal of a million records.

const (
	millionRecords = 1_000_000
	benchResources = 1000
)

var (
	millionOnce sync.Once
	millionPath string
	millionErr  error
)

// millionJournal builds, once per test binary, a journal of a million
// records shaped like a host's life: declarations, reconciles of 1,000
// resources with their outcomes, drift and its repair.
func millionJournal(b *testing.B) string {
	b.Helper()
	millionOnce.Do(func() {
		dir, err := onceDirs.make("mesh-host-bench-")
		if err != nil {
			millionErr = err
			return
		}
		millionPath = filepath.Join(dir, "journal.db")
		millionErr = buildHistory(millionPath, millionRecords)
	})
	if millionErr != nil {
		b.Fatal(millionErr)
	}
	return millionPath
}

func resourceID(i int) string { return fmt.Sprintf("file:/etc/app/conf.d/%04d.conf", i) }

// buildHistory appends n records to a new journal at path, a reconcile (its
// declaration, start, outcomes, completion) per transaction.
func buildHistory(path string, n int) error {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	j, err := journal.Open(path, journal.Options{
		Fold: new(projector.Stored).Fold,
		Now:  func() time.Time { t = t.Add(time.Second); return t },
	})
	if err != nil {
		return err
	}
	defer j.Close()
	var head uint64
	for rev := uint64(1); head < uint64(n); rev++ {
		decl := event.DeclarationReceivedPayload{Revision: rev, Digest: fmt.Sprintf("sha256:%064x", rev), Source: "push"}
		for i := range benchResources {
			decl.Resources = append(decl.Resources, event.DeclaredResource{ID: resourceID(i), SpecDigest: fmt.Sprintf("sha256:%x", rev*1000+uint64(i))})
		}
		batch := []event.Record{event.New(event.DeclarationReceived, 0, "", decl)}
		declSeq, startSeq := head+1, head+2
		batch = append(batch, event.New(event.ReconcileStarted, declSeq, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed, Revision: rev}))
		for i := 0; i < benchResources && head+uint64(len(batch)) < uint64(n)-1; i++ {
			batch = append(batch, event.New(event.ResourceApplied, startSeq, resourceID(i), event.ResourceAppliedPayload{
				Action: event.ActionUpdate, SpecDigest: decl.Resources[i].SpecDigest,
			}))
		}
		batch = append(batch, event.New(event.ReconcileCompleted, startSeq, "", event.ReconcileCompletedPayload{
			Trigger: event.TriggerPushed, Revision: rev, Result: event.ResultConverged, Changed: len(batch) - 2,
		}))
		if head+uint64(len(batch)) > uint64(n) {
			batch = batch[:uint64(n)-head]
		}
		if _, err := j.Append(batch...); err != nil {
			return err
		}
		head += uint64(len(batch))
	}
	return nil
}

// BenchmarkReplayMillion: `mesh-host replay` of 1,000,000 records.
func BenchmarkReplayMillion(b *testing.B) {
	path := millionJournal(b)
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	b.ResetTimer()
	for b.Loop() {
		s, n, err := hostjournal.Replay(j, 0, time.Time{})
		if err != nil || n != millionRecords || s.Head != millionRecords {
			b.Fatalf("replayed %d records to head %d: %v", n, s.Head, err)
		}
	}
	b.ReportMetric(float64(millionRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkWhyMillion: `mesh-host journal --why RESOURCE` on a 1,000,000
// record journal, the whole command: open the file, find the resource's
// latest record, walk its causes, print, close.
func BenchmarkWhyMillion(b *testing.B) {
	path := millionJournal(b)
	args := []string{"--journal", path, "journal", "--why", resourceID(7)}
	if code := runCLI(b.Context(), args, io.Discard, os.Stderr, nil); code != 0 {
		b.Fatalf("exit %d", code)
	}
	b.ResetTimer()
	for b.Loop() {
		runCLI(b.Context(), args, io.Discard, os.Stderr, nil)
	}
}
