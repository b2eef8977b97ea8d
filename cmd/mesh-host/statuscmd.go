package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/mesh-host/mesh-host/cmd/internal/statusview"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/projector"
)

type statusCmd struct {
	JSON  bool `name:"json" help:"Print the projection as JSON."`
	Owned bool `name:"owned" help:"List every owned resource, not only the drifted and failed ones."`
}

func (c *statusCmd) Run(e *env) error {
	return e.withJournal(func(j *journal.Journal) error {
		s, _, err := hostjournal.StoredState(j)
		if err != nil {
			return failed("stored projection of %s: %v", j.Path(), err)
		}
		info, err := j.Info()
		if err != nil {
			return failed("%v", err)
		}
		return printState(e, c.JSON, c.Owned, s, &info)
	})
}

// notHeld says why a link the journal records as up is not held now, when
// status reads the file itself: only the service holds the link, and a
// service that answered would have been asked.
func notHeld(e *env) func(recorded string) string {
	why := "the service is not running"
	if e.cli.Journal != "" {
		why = "read from the file, not from a running service"
	}
	return func(recorded string) string {
		return "not held: " + why + " (last journaled: " + recorded + ")"
	}
}

// printState prints a State for a person (the drifted and failed resources,
// or with allOwned every owned one), or as JSON with the journal's info
// beside it.
func printState(e *env, asJSON, allOwned bool, s projector.State, info *journal.Info) error {
	if asJSON {
		out := struct {
			Journal *journal.Info   `json:"journal,omitempty"`
			State   projector.State `json:"state"`
		}{info, s}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	o := statusview.Options{AllOwned: allOwned}
	if info != nil {
		o.Header = [][2]string{{"journal", fmt.Sprintf("%s: head #%d, first #%d, %s", info.Path, info.Head, info.First, bytesHuman(info.Size))}}
		if e.held == nil {
			// Read from the file, not by the service: the host that
			// started last may be gone. (The service is that host.)
			o.Alive = processAlive
			if s.Link.Up {
				o.Link = notHeld(e)
			}
		}
	} else {
		o.Header = [][2]string{{"head", fmt.Sprintf("#%d", s.Head)}}
	}
	return statusview.Print(e.stdout, s, o)
}

// processAlive reports whether pid is a running mesh-host: a process with
// that pid whose command line names mesh-host, not a zombie. A pid reused
// by anything else is not the host.
func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) // no /proc here: kill said it runs
	}
	if !bytes.Contains(cmdline, []byte("mesh-host")) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && len(stat) > i+2 {
		return stat[i+2] != 'Z'
	}
	return true
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
