package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// The figures the journal issue asks for, end to end through the code the
// commands run: replay and --why on a journal of a million records, and on
// one made by real applies.

const (
	millionRecords = 1_000_000
	benchResources = 1000
)

// builtOnce is a journal a benchmark builds once per test binary, in a
// directory of onceDirs.
type builtOnce struct {
	once sync.Once
	path string
	err  error
}

// get builds the journal with build, in a new directory named with
// prefix, the first time; it returns its path.
func (o *builtOnce) get(b *testing.B, prefix string, build func(dir string) (string, error)) string {
	b.Helper()
	o.once.Do(func() {
		dir, err := onceDirs.make(prefix)
		if err == nil {
			o.path, err = build(dir)
		}
		o.err = err
	})
	if o.err != nil {
		b.Fatal(o.err)
	}
	return o.path
}

var millionBuilt builtOnce

// millionJournal builds, once per test binary, a journal of a million
// records shaped like a host's life: declarations, reconciles of 1,000
// resources with their outcomes, drift and its repair.
func millionJournal(b *testing.B) string {
	return millionBuilt.get(b, "mesh-host-bench-", func(dir string) (string, error) {
		path := filepath.Join(dir, "journal.db")
		return path, buildHistory(path, millionRecords)
	})
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

const (
	appliedFiles     = 1000 // files in the declaration
	appliedRevisions = 50   // revisions after the first, each changing appliedChanged files
	appliedChanged   = 10
)

var appliedBuilt builtOnce

// appliedJournal builds, once per test binary, a journal made by real
// applies (not records written for the benchmark): a declaration of
// appliedFiles files, then appliedRevisions revisions each changing the
// content of appliedChanged of them, every one applied by `mesh-host
// apply` to a root of its own. Each revision's document is stored once,
// by its digest.
func appliedJournal(b *testing.B) string {
	return appliedBuilt.get(b, "mesh-host-applied-", func(dir string) (string, error) {
		root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
		if err := os.MkdirAll(filepath.Join(root, "etc", "app"), 0o755); err != nil {
			return "", err
		}
		decl := filepath.Join(dir, "decl.yaml")
		for rev := 1; rev <= 1+appliedRevisions; rev++ {
			var sb strings.Builder
			fmt.Fprintf(&sb, "mesh: bench\nnode: n1\nrevision: %d\nresources:\n", rev)
			for i := range appliedFiles {
				// File i has changed in every revision after the one that
				// first changed it: revision r changes files 10(r-2) to 10(r-1)-1.
				changedIn := 1
				if first := i/appliedChanged + 2; first <= rev {
					changedIn = first
				}
				fmt.Fprintf(&sb, "  - file: {path: /etc/app/f%05d.conf, content: \"setting-%d = %d\\n\", mode: \"0644\"}\n", i, i, changedIn)
			}
			if err := os.WriteFile(decl, []byte(sb.String()), 0o600); err != nil {
				return "", err
			}
			var out strings.Builder
			if code := runCLI(context.Background(), []string{"--root", root, "--state-dir", state, "apply", decl}, &out, &out, nil); code != 0 {
				return "", fmt.Errorf("apply revision %d: exit %d\n%s", rev, code, out.String())
			}
		}
		return filepath.Join(state, "journal.db"), nil
	})
}

// BenchmarkReplayApplied: `mesh-host replay`'s fold of a journal made by
// 51 real applies of a 1,000-file declaration (documents and all).
func BenchmarkReplayApplied(b *testing.B) {
	path := appliedJournal(b)
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	info, err := j.Info()
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		s, n, err := hostjournal.Replay(j, 0, time.Time{})
		if err != nil || s.Head != info.Head || s.Desired == nil || s.Desired.Revision != 1+appliedRevisions || len(s.Owned) != appliedFiles {
			b.Fatalf("replayed %d records to head %d (want %d): %v", n, s.Head, info.Head, err)
		}
	}
	b.ReportMetric(float64(info.Head), "records")
	b.ReportMetric(float64(info.Head)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkWhyApplied: `mesh-host journal --why` of a file changed in the
// last revision, on the journal BenchmarkReplayApplied replays: the whole
// command, open to close.
func BenchmarkWhyApplied(b *testing.B) {
	path := appliedJournal(b)
	last := (appliedRevisions - 1) * appliedChanged
	args := []string{"--journal", path, "journal", "--why", fmt.Sprintf("file:/etc/app/f%05d.conf", last)}
	var out strings.Builder
	if code := runCLI(b.Context(), args, &out, os.Stderr, nil); code != 0 || !strings.Contains(out.String(), fmt.Sprintf("revision=%d", 1+appliedRevisions)) {
		b.Fatalf("exit %d, and the answer (%d bytes) does not name revision %d:\n%s", code, out.Len(), 1+appliedRevisions, out.String())
	}
	b.ResetTimer()
	for b.Loop() {
		runCLI(b.Context(), args, io.Discard, os.Stderr, nil)
	}
}
