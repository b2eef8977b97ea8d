package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/fsnotify/fsnotify"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// follow calls fn for every record from `from` on, as it is appended, until
// the command's context ends. It outlives the service: while one runs it
// streams records from it over the socket; when it stops (to stand aside for
// a new version, say) it reads the file whenever the file changes, and goes
// back to the socket when a service answers again. No polling: it waits on
// the socket stream or on inotify.
func (e *env) follow(from uint64, fn func(event.Record) error) error {
	if e.held != nil {
		return e.held.Journal.Follow(e.ctx, from, fn)
	}
	path := e.cli.journalPath()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return failed("watch %s: %v", path, err)
	}
	defer w.Close()
	for _, dir := range uniq(filepath.Dir(path), filepath.Dir(e.cli.socketPath())) {
		if err := w.Add(dir); err != nil {
			return failed("watch %s: %v", dir, err)
		}
	}
	next := max(from, 1)
	deliver := func(r event.Record) error {
		if r.Seq < next {
			return nil // seen already, from the other source
		}
		next = r.Seq + 1
		return fn(r)
	}
	for e.ctx.Err() == nil {
		if e.cli.Journal == "" {
			err := e.followService(next, deliver)
			if !errors.Is(err, localsock.ErrNoService) {
				if e.ctx.Err() != nil {
					return nil
				}
				if err != nil {
					fmt.Fprintf(e.stderr, "mesh-host: the service stopped answering (%v); following the file\n", err)
				}
				continue
			}
		}
		err := e.scanFile(next, deliver)
		switch {
		case errors.Is(err, journal.ErrLocked), errors.Is(err, journal.ErrNotExist):
			// Someone (an apply, or a service starting) holds it, or it is
			// not made yet: the next change says when to look again.
		case err != nil:
			return err
		}
		if err := waitChange(e, w); err != nil {
			return err
		}
	}
	return nil
}

// followService streams records from the running service. It returns
// ErrNoService at once when none answers, and nil when the service ends the
// stream (it stopped).
func (e *env) followService(from uint64, fn func(event.Record) error) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 32<<20)
		var err error
		for sc.Scan() {
			var r event.Record
			if err = json.Unmarshal(sc.Bytes(), &r); err != nil {
				err = fmt.Errorf("service sent a record that does not decode: %w", err)
				break
			}
			if err = fn(r); err != nil {
				break
			}
		}
		if err == nil {
			err = sc.Err()
		}
		pr.CloseWithError(err)
		done <- err
	}()
	args := []string{"journal", "--json", "--follow", "--since", strconv.FormatUint(from, 10)}
	code, err := localsock.Call(e.ctx, e.cli.socketPath(), args, pw, e.stderr)
	pw.Close()
	if perr := <-done; perr != nil && err == nil {
		err = perr
	}
	if err == nil && code != command.ExitOK {
		err = fmt.Errorf("service's follow exited %d", code)
	}
	return err
}

// scanFile opens the file just long enough to read what is new: holding it
// would lock out the next `apply` or service start. Each record is checked
// as it is read, and the open checks the file's damage mark.
func (e *env) scanFile(from uint64, fn func(event.Record) error) error {
	j, err := hostjournal.OpenReadOnly(e.cli.journalPath())
	if err != nil {
		return err
	}
	defer j.Close()
	return j.Scan(from, 0, fn)
}

// waitChange blocks until something changes in the watched directories or
// the command ends.
func waitChange(e *env, w *fsnotify.Watcher) error {
	select {
	case <-e.ctx.Done():
		return nil
	case _, ok := <-w.Events:
		if !ok {
			return failed("file watch closed")
		}
	case err := <-w.Errors:
		return failed("watch: %v", err)
	}
	// Drain what queued behind it: one look covers them all.
	for {
		select {
		case <-w.Events:
		default:
			return nil
		}
	}
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}
