package journal_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// envCrashCompact makes crashChild compact between batches.
const envCrashCompact = "JOURNAL_TEST_CRASH_COMPACT"

// crashChild appends batches of random size to the journal at path until it
// is killed, printing each batch's last sequence once Append has returned:
// a printed number is a promise that the batch is committed.
func crashChild(path string) int {
	compact := os.Getenv(envCrashCompact) != ""
	j, err := journal.Open(path, journal.Options{Fold: testFold, Timeout: 10 * time.Second, Documents: documentsOf})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	in, err := j.Info()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	head := in.Head
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	kinds := []event.Kind{event.ResourceApplied, event.ReconcileStarted, event.DriftObserved, "future.kind"}
	for {
		batch := make([]event.Record, 1+rng.IntN(500))
		for i := range batch {
			r := event.Record{
				Kind:    kinds[rng.IntN(len(kinds))],
				Payload: fmt.Appendf(nil, `{"n":%d}`, rng.Uint32()),
			}
			if rng.IntN(2) == 0 {
				r.Cause = rng.Uint64N(head + 1) // any earlier record, or none
			}
			if rng.IntN(4) != 0 {
				r.Resource = "file:/r" + strconv.Itoa(rng.IntN(50))
			}
			batch[i] = r
		}
		// Some batches carry a document, sharing most chunks with the
		// last: a kill may land among its chunks.
		var docs [][]byte
		if rng.IntN(4) == 0 {
			changed := rng.IntN(3000)
			docs = [][]byte{resources(3000, func(i int) string {
				if i == changed {
					return strconv.FormatUint(rng.Uint64(), 16)
				}
				return setting(i)
			})}
			batch[len(batch)-1] = refRecord(docs[0])
		}
		out, err := j.AppendDocuments(docs, batch...)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		head = out[len(out)-1].Seq
		if compact && rng.IntN(3) == 0 {
			// Everything but the newest few hundred records is old enough.
			o := journal.CompactOptions{Window: time.Nanosecond, KeepLast: 1 + rng.Uint64N(1000)}
			res, err := j.Compact(o)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if res.Through > 0 {
				head++ // the journal.compacted record
			}
		}
		// One write, shorter than PIPE_BUF: the line arrives whole or not at all.
		if _, err := fmt.Fprintf(os.Stdout, "%d\n", head); err != nil {
			return 1
		}
	}
}

// TestCrash kills a writer with SIGKILL at random moments and checks, after
// every kill, that nothing it reported committed is missing, that the
// sequence has no gap, that every document a record refers to is there
// and whole, and that the stored projection is what replaying every record
// gives.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 60 child processes")
	}
	crashLoop(t, 60, false)
}

// TestCrashWhileCompacting is TestCrash with a writer that compacts every few
// batches, so some kills land in a compaction: between its snapshot and its
// deletions, between deletions, or in the rewrite of the file.
func TestCrashWhileCompacting(t *testing.T) {
	if testing.Short() {
		t.Skip("kills 60 child processes")
	}
	crashLoop(t, 60, true)
}

func crashLoop(t *testing.T, kills int, compact bool) {
	path := filepath.Join(t.TempDir(), "journal.db")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	start := time.Now()
	var promised uint64
	var midRewrite, midDrop int
	for i := range kills {
		delay := time.Duration(5+rng.IntN(76)) * time.Millisecond
		last := runAndKill(t, path, delay, compact)
		if last < promised {
			t.Fatalf("kill %d: child printed %d, below the %d printed before", i, last, promised)
		}
		promised = last
		_, err := os.Stat(path + ".compacting")
		leftover := err == nil
		in := verifyJournal(t, path, promised)
		t.Logf("kill %d after %s: child printed %d; head %d, first %d, snapshot %d, compaction copy left: %v",
			i, delay, last, in.Head, in.First, in.SnapshotSeq, leftover)
		if leftover {
			midRewrite++
		}
		if in.First <= in.SnapshotSeq {
			midDrop++
		}
	}
	t.Logf("%d kills in %s", kills, time.Since(start).Round(time.Millisecond))
	if compact {
		t.Logf("%d kills during a rewrite, %d between a snapshot and the end of its deletions", midRewrite, midDrop)
	}
}

// runAndKill starts a crashChild on path, kills it delay after its first
// printed line, and returns the highest sequence it printed.
func runAndKill(t *testing.T, path string, delay time.Duration, compact bool) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envCrash+"="+path)
	if compact {
		cmd.Env = append(cmd.Env, envCrashCompact+"=1")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	type result struct {
		last uint64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			n, err := strconv.ParseUint(sc.Text(), 10, 64)
			if err != nil && res.err == nil {
				res.err = fmt.Errorf("child printed %q", sc.Text())
			}
			if res.last == 0 {
				close(first)
			}
			res.last = max(res.last, n)
		}
		if res.err == nil {
			res.err = sc.Err()
		}
		done <- res
	}()
	select {
	case <-first:
	case res := <-done:
		_ = cmd.Wait()
		t.Fatalf("child ended before committing anything (%v): %s", res.err, stderr.String())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child committed nothing in 30s: %s", stderr.String())
	}
	<-time.After(delay) // the moment of the crash, not a wait for something
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-done // the pipe closes when the child is gone
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: got %v, want killed by SIGKILL: %s", err, stderr.String())
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res.last
}

// verifyJournal opens path after a crash and checks it against the last
// sequence the writer promised.
func verifyJournal(t *testing.T, path string, promised uint64) journal.Info {
	t.Helper()
	j, err := journal.Open(path, journal.Options{Fold: testFold, Documents: documentsOf})
	if err != nil {
		t.Fatalf("open after kill: %v", err)
	}
	defer j.Close()
	if _, err := os.Stat(path + ".compacting"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after open: got stat %v for the compaction copy, want it removed", err)
	}
	in, err := j.Info()
	if err != nil {
		t.Fatal(err)
	}
	if in.Head < promised {
		t.Fatalf("got head %d, want at least %d, the last sequence reported committed", in.Head, promised)
	}
	// Records up to the snapshot may be gone; none after it may be. A kill
	// between a compaction's deleting transactions leaves some it covers.
	if in.First == 0 || in.First > in.SnapshotSeq+1 {
		t.Fatalf("got first record %d after a snapshot through %d, want at most %d", in.First, in.SnapshotSeq, in.SnapshotSeq+1)
	}
	snap, snapSeq, err := snapshotOf(j)
	if err != nil {
		t.Fatal(err)
	}
	if snapSeq > 0 {
		var s foldState
		if err := json.Unmarshal(snap, &s); err != nil || s.Count != snapSeq || s.Last != snapSeq {
			t.Fatalf("got snapshot %s (%v) at %d, want a fold of records 1..%d", snap, err, snapSeq, snapSeq)
		}
	}

	// Replay from the snapshot, as `replay --verify` does.
	var (
		next  = in.First
		proj  = snap
		batch []event.Record
	)
	flush := func() error {
		var err error
		proj, err = blobFold(proj, batch)
		batch = batch[:0]
		return err
	}
	err = j.Scan(in.First, 0, func(r event.Record) error {
		if r.Seq != next {
			return fmt.Errorf("got seq %d, want %d", r.Seq, next)
		}
		if r.Cause >= r.Seq {
			return fmt.Errorf("record %d: got cause %d, want an earlier record", r.Seq, r.Cause)
		}
		for _, sum := range documentsOf(r) {
			if _, err := j.Document(sum); err != nil {
				return fmt.Errorf("record %d: %w", r.Seq, err)
			}
		}
		next++
		if r.Seq > snapSeq {
			batch = append(batch, r)
		}
		if len(batch) == 4096 {
			return flush()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	if err != nil {
		t.Fatalf("scan after kill: %v", err)
	}
	if got := next - 1; got != in.Head {
		t.Fatalf("scan: got records %d..%d, want %d..%d", in.First, got, in.First, in.Head)
	}
	stored, head, err := projectionOf(j)
	if err != nil {
		t.Fatal(err)
	}
	if head != in.Head || !bytes.Equal(stored, proj) {
		t.Fatalf("got stored projection %s at %d, want the replay %s at %d", stored, head, proj, in.Head)
	}
	return in
}
