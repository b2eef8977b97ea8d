package service

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/upgrade"
)

// errStoodAside ends the service's run group when the host stands aside for
// a newer version: serve then exits 0, which the launcher reads as exactly
// that.
var errStoodAside = errors.New("stood aside for a newer version")

// hostVersion is the service's own version and its side of the upgrade
// design (package upgrade): which version it runs, read from its own
// executable once at start; the launcher's decisions journaled; the version
// confirmed, recorded known-good and its elders retired after its first
// completed reconcile; and, between reconciles, whether to stand aside.
//
// A process that is not a managed version (its executable is not
// VERSIONS/NAME/mesh-host: a build directory, `go run`) reports its
// link-time version and only asks whether its executable was replaced.
type hostVersion struct {
	build    string        // the link-time version
	self     *upgrade.Self // nil when the executable could not be resolved
	dir      string        // the versions directory on this machine: ROOT + --versions
	stateDir string
	managed  bool
	running  upgrade.Version // when managed
	j        *journal.Journal
	log      *slog.Logger

	// started is set once this run has completed a reconcile: the start
	// succeeded, and the version is confirmed.
	started bool
	// journaled holds the versions the journal says are on disk.
	journaled map[string]bool
	// step, in tests, is called after each durable step of confirming; an
	// error stops there, as a kill would.
	step func(name string) error
}

// resolveVersion finds which version this process is: once, at start.
func resolveVersion(build, root, versions, stateDir string, log *slog.Logger) *hostVersion {
	h := &hostVersion{build: build, dir: filepath.Join(root, versions), stateDir: stateDir, log: log}
	self, err := upgrade.Resolve()
	if err != nil {
		log.Warn("cannot tell which executable this is: no upgrade checks", "err", err)
		return h
	}
	h.self = self
	h.running, h.managed, err = upgrade.Running(self.Path, h.dir)
	if err != nil {
		log.Warn("running from a version directory that is not a version: not a managed version", "executable", self.Path, "err", err)
	} else if !h.managed {
		// A version directory elsewhere: the launcher and the host
		// disagree about where versions live, and upgrades would stall.
		vdir := filepath.Dir(self.Path)
		if _, err := upgrade.Lookup(filepath.Dir(vdir), filepath.Base(vdir)); err == nil {
			log.Warn("running from a version directory outside the versions directory: upgrades are off; set --versions (under --root) to where the launcher finds versions",
				"executable", self.Path, "versions", h.dir)
		}
	}
	return h
}

// name is the running version as the host reports it: the version
// directory's name when managed, else the link-time version.
func (h *hostVersion) name() string {
	if h.managed {
		return h.running.Name
	}
	return h.build
}

// startedPayload is the host.started record of this process.
func (h *hostVersion) startedPayload() event.HostStartedPayload {
	p := event.HostStartedPayload{Version: h.name(), PID: os.Getpid()}
	if h.managed && h.build != h.running.Name {
		p.Build = h.build
	}
	return p
}

// atStart journals what the launcher decided while no host ran (then
// removes its decision file), removes what an interrupted retirement left,
// and journals the versions on disk that the journal does not know of, and
// those it knows of that are gone. It fails only when the journal does;
// what it cannot read of the disk is logged.
func (h *hostVersion) atStart(j *journal.Journal) error {
	h.j = j
	ds, err := upgrade.Decisions(h.stateDir)
	if err != nil {
		h.log.Warn("launcher decisions", "err", err)
	}
	for _, d := range ds {
		reason := d.Reason
		if reason == "" {
			reason = fmt.Sprintf("exit code %d", d.ExitCode)
		}
		rec := event.New(event.VersionRolledBack, 0, "", event.VersionRolledBackPayload{From: d.From, To: d.To, Reason: reason})
		if d.Verb == upgrade.VerbHalted {
			p := event.VersionHaltedPayload{Failed: d.From, ExitCode: d.ExitCode, Reason: reason}
			if d.To != d.From {
				p.Other = d.To
			}
			rec = event.New(event.VersionHalted, 0, "", p)
		}
		if _, err := j.Append(rec); err != nil {
			return fmt.Errorf("journal the launcher's decision: %w", err)
		}
	}
	if len(ds) > 0 || err != nil {
		if err := upgrade.RemoveDecisions(h.stateDir); err != nil {
			return fmt.Errorf("remove the launcher's decisions, journaled: %w", err)
		}
	}
	if !h.managed {
		return nil
	}
	if swept, err := upgrade.Sweep(h.dir); err != nil {
		h.log.Warn("remove what a retirement left", "err", err)
	} else if len(swept) > 0 {
		h.log.Info("removed what an interrupted retirement left", "versions", swept)
	}
	s, _, err := hostjournal.StoredState(j)
	if err != nil {
		return err
	}
	h.journaled = make(map[string]bool, len(s.Versions))
	for _, v := range s.Versions {
		h.journaled[v] = true
	}
	vs, err := upgrade.List(h.dir)
	if err != nil {
		h.log.Warn("list versions", "err", err)
		return nil
	}
	onDisk := make(map[string]bool, len(vs))
	for _, v := range vs {
		onDisk[v.Name] = true
	}
	for _, v := range s.Versions {
		if !onDisk[v] {
			if err := h.append(event.VersionRetired, event.VersionPayload{Version: v}); err != nil {
				return err
			}
			delete(h.journaled, v)
		}
	}
	return h.journalDelivered(vs)
}

// journalDelivered journals version.delivered for each of vs the journal
// does not know of, oldest first.
func (h *hostVersion) journalDelivered(vs []upgrade.Version) error {
	for _, v := range vs {
		if h.journaled[v.Name] {
			continue
		}
		if err := h.append(event.VersionDelivered, event.VersionPayload{Version: v.Name}); err != nil {
			return err
		}
		h.journaled[v.Name] = true
	}
	return nil
}

func (h *hostVersion) append(kind event.Kind, payload any) error {
	if _, err := h.j.Append(event.New(kind, 0, "", payload)); err != nil {
		return fmt.Errorf("journal %s: %w", kind, err)
	}
	return nil
}

// between runs between reconciles, never during one. completed says a
// reconcile has just completed: the first one confirms this version. It
// then decides whether to stand aside: a version arrived after this one
// that the launcher would start (upgrade.Pick), or this executable was
// replaced. aside is the record to journal before exiting; nil to keep
// running. Errors are the caller's to log: none of them is a reason to
// stop.
func (h *hostVersion) between(completed bool) (aside *event.VersionStoodAsidePayload, err error) {
	var errs []error
	if completed && !h.started {
		if err := upgrade.ClearFailures(h.stateDir); err != nil {
			errs = append(errs, fmt.Errorf("clear the launcher's failure count: %w", err))
		}
		if !h.managed {
			h.started = true
		} else if err := h.confirm(); err != nil {
			errs = append(errs, err) // tried again after the next reconcile
		} else {
			h.started = true
		}
	}
	if h.managed {
		next, err := h.successor()
		if err != nil {
			errs = append(errs, err)
		} else if next != nil {
			return &event.VersionStoodAsidePayload{Running: h.running.Name, Newer: next.Name,
				Reason: fmt.Sprintf("version %s arrived after the running one (arrival %d, after %d)", next.Name, next.Counter, h.running.Counter)}, errors.Join(errs...)
		}
	}
	if h.self != nil {
		replaced, why, err := h.self.Replaced()
		if err != nil {
			errs = append(errs, err)
		} else if replaced {
			return &event.VersionStoodAsidePayload{Running: h.name(), Reason: why}, errors.Join(errs...)
		}
	}
	return nil, errors.Join(errs...)
}

// successor is the version the launcher would start instead of this one,
// nil when it would start this one. Versions newly on disk are journaled
// as delivered.
func (h *hostVersion) successor() (*upgrade.Version, error) {
	vs, err := upgrade.List(h.dir)
	if err != nil {
		return nil, err
	}
	if err := h.journalDelivered(vs); err != nil {
		return nil, err
	}
	kg, err := upgrade.ReadKnownGood(h.stateDir)
	if err != nil {
		h.log.Warn("known-good record", "err", err)
	}
	bad, _, err := upgrade.Bad(h.stateDir)
	if err != nil {
		h.log.Warn("launcher's bad mark", "err", err)
	}
	next, ok := upgrade.Pick(vs, kg, bad)
	if !ok || next.Name == h.running.Name || next.Counter <= h.running.Counter {
		return nil, nil
	}
	return &next, nil
}

// confirm makes the running version the known-good one and retires the
// versions older than its predecessor. The order makes a kill at any point
// harmless, and the next start's first reconcile finishes the job:
//
//  1. version.confirmed is journaled, unless the journal says so already;
//  2. versions older than the predecessor are retired (each renamed aside,
//     so never half a version) and journaled as retired;
//  3. the known-good record names the running version.
//
// Until 3, the record still names the predecessor: it is what the next try
// retires against, and what the launcher rolls back to, and it is never
// retired. The newest version is never retired either.
func (h *hostVersion) confirm() error {
	s, _, err := hostjournal.StoredState(h.j)
	if err != nil {
		return err
	}
	record, err := upgrade.ReadKnownGood(h.stateDir)
	if err != nil {
		h.log.Warn("known-good record unreadable; writing it anew", "err", err)
	}
	run := h.running.Name
	if s.KnownGood == run && record == run {
		return nil
	}
	pred := record
	if pred == "" || pred == run {
		pred = s.KnownGood
	}
	if pred == run {
		pred = "" // none: Retire takes the newest version older than running
	}
	if s.KnownGood != run {
		if err := h.append(event.VersionConfirmed, event.VersionPayload{Version: run}); err != nil {
			return err
		}
		h.log.Info("version confirmed: it completed a reconcile", "version", run, "predecessor", pred)
	}
	if err := h.stepDone("confirmed"); err != nil {
		return err
	}
	removed, rerr := upgrade.Retire(h.dir, run, pred)
	for _, v := range removed {
		delete(h.journaled, v.Name)
		if err := h.append(event.VersionRetired, event.VersionPayload{Version: v.Name}); err != nil {
			return err
		}
		h.log.Info("version retired", "version", v.Name)
	}
	if rerr != nil {
		// Left on disk; the next confirmation retires it. The record is
		// written regardless: this version is good either way.
		h.log.Warn("retire old versions", "err", rerr)
	}
	if err := h.stepDone("retired"); err != nil {
		return err
	}
	if record != run {
		if err := upgrade.WriteKnownGood(h.stateDir, run); err != nil {
			return err
		}
	}
	return h.stepDone("recorded")
}

func (h *hostVersion) stepDone(name string) error {
	if h.step == nil {
		return nil
	}
	return h.step(name)
}

// ReleaseVersions is the reconciler's Release: an archive whose path is a
// directory directly in the versions directory is a host version, which a
// declaration that stops naming it leaves in place for retirement (the
// running version and its predecessor must outlive the declaration that
// delivered them).
func ReleaseVersions(versions string) func(id string) bool {
	versions = path.Clean(versions)
	return func(id string) bool {
		kind, key, ok := drivers.SplitID(id)
		return ok && kind == drivers.KindArchive && path.Dir(path.Clean(key)) == versions
	}
}
