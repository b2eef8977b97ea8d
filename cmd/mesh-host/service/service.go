// Package service is the host service: one run.Group of the link to the
// control plane, the reconcile loop, the local socket that answers the
// CLI, the watch on the host's own versions, the journal's compaction and
// its scrub, around the one journal the service holds.
//
// It is told everything by package service, which holds the grammar and
// decides: the paths, the intervals, how to reconcile and what to admit,
// and how a client's command line runs inside the service (Config.Handler).
// It does not parse flags and does not choose drivers.
package service

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostmetrics"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// ErrRefused is returned, wrapped, when the service's configuration is
// refused (its enrolment, its link's settings): nothing was started.
// Package main turns it into exit code 2, the rest into 1, and damage to
// the journal (hostjournal.IsDamage) into its own.
var ErrRefused = errors.New("refused")

// refusal is an error that is ErrRefused, saying only its own message.
type refusal struct{ err error }

func (r refusal) Error() string        { return r.err.Error() }
func (r refusal) Unwrap() error        { return r.err }
func (r refusal) Is(target error) bool { return target == ErrRefused }

func refused(format string, a ...any) error { return refusal{fmt.Errorf(format, a...)} }

// Config is what the service is told.
type Config struct {
	// Build is this binary's version label, set at link time.
	Build string
	// Root is the root prefix the host manages; Versions the directory of
	// the host's own versions under it.
	Root, Versions string
	// StateDir holds the enrolment; JournalPath and SocketPath are the
	// journal the service holds and the socket it answers the CLI on.
	StateDir, JournalPath, SocketPath string

	DriftInterval     time.Duration // how often to look for drift
	CompactEvery      time.Duration // how often to drop records older than Retention
	Retention         time.Duration // keep records at least this long
	KeepLast          uint64        // keep at least this many newest records
	StopTimeout       time.Duration // how long an apply in flight may go on once ctx ends
	HeartbeatInterval time.Duration // how often the link reports while idle
	PingInterval      time.Duration // how often the link asks whether the broker still answers
	ScrubInterval     time.Duration // how often to re-read the whole journal for damage

	Log *slog.Logger

	// Handler runs a client's command line inside the service, against
	// the journal held, and returns its exit code.
	Handler func(ctx context.Context, args []string, stdout, stderr io.Writer, held *Held) int
	// Reconcile reconciles the root to the declaration j holds: at start,
	// on a declaration accepted, on the drift timer. The service holds
	// the reconcile lock around it.
	Reconcile func(ctx context.Context, j *journal.Journal, trigger event.Trigger) (*agent.Result, error)
	// Admit refuses a declaration pushed by the control plane that the
	// host must not accept, given the stored state s.
	Admit func(d *declaration.Declaration, s projector.State) error
	// Plan plans d against the root as `mesh-host plan` does, for a plan
	// request from the control plane: it refuses what Admit would, and
	// changes and journals nothing. The service holds the reconcile lock
	// around it. Nil answers every plan request refused.
	Plan planFunc
	// Facts reads the machine's facts, journaled at start and every
	// DriftInterval when they changed; nil journals none.
	Facts func() event.HostFactsPayload
	// Watch, when set, calls drifted whenever something the host holds
	// may have drifted and something can tell (a service manager saying
	// a unit stopped), until ctx ends; the service then reconciles at
	// once (trigger watch) rather than at its drift timer. j is the
	// journal held, for what is declared. An error (no service manager
	// runs, its bus went away) is logged and Watch is tried again a
	// while later: the drift timer is the floor.
	Watch func(ctx context.Context, j *journal.Journal, drifted func()) error
	// MetricsListener, when set, is where the host's Prometheus series
	// (package hostmetrics) are served on /metrics, opened by the caller
	// so that an address in use is refused before anything starts. The
	// service closes it. Nil serves none and counts nothing.
	MetricsListener net.Listener
	// ReturnHeap, when set, returns the process's freed heap to the
	// system after each reconcile and a client's command: the process's
	// one returner, which paces returns when many services share it. Nil
	// gives back only the journal's pages.
	ReturnHeap func()
}

// Run runs the host service until ctx ends. It holds the journal,
// records its own start, answers the CLI over its socket (Config.Handler),
// reconciles (at start, on a declaration accepted, on the drift timer),
// compacts the journal every CompactEvery and, when the host is enrolled
// (STATE-DIR/link.json), runs the link to the control plane. Without an
// enrolment it runs offline.
//
// The journal is read whole by the scrub, every ScrubInterval (see
// scrubLoop); its start reads what it needs, checked as read. Damage
// found in it, at start or by anything while it runs (a reconcile, a
// command a client asked for, the link, the scrub), stops the service with
// the recovery message, an error hostjournal.IsDamage knows: nothing is
// appended to a damaged journal, and a reconcile from it cannot be trusted.
//
// Between reconciles it looks after its own version (hostVersion): its
// first completed reconcile confirms it, and a newer version delivered, or
// its executable replaced, makes it stand aside: it journals
// version.stood-aside and returns nil, for the launcher to start the
// newer one.
func Run(ctx context.Context, c Config) error {
	log := c.Log
	if c.MetricsListener != nil {
		defer c.MetricsListener.Close() // on a refusal, as on a stop
	}
	// Which executable this is, before anything could replace it.
	hv := resolveVersion(c.Build, c.Root, c.Versions, c.StateDir, log)
	enrolled, creds, linked, err := enrolment.Load(c.StateDir)
	if err != nil {
		return refused("%v", err)
	}
	var brokerTLS *tls.Config
	if linked {
		if brokerTLS, err = enrolment.TLS(c.StateDir, enrolled); err != nil {
			return refused("%v", err)
		}
	}
	tightened, err := tightenDirs(c.StateDir, filepath.Dir(c.SocketPath))
	if err != nil {
		return err
	}
	// Without metrics the journal is opened as ever: no hook to call.
	var metrics *hostmetrics.Metrics
	open := hostjournal.Open
	if c.MetricsListener != nil {
		metrics = hostmetrics.New(hostmetrics.Build{Version: hv.name(), Label: c.Build})
		open = func(path string) (*journal.Journal, error) { return hostjournal.OpenAppended(path, metrics.Appended) }
	}
	j, err := open(c.JournalPath)
	if err != nil {
		return err
	}
	defer j.Close()
	// What the service starts from, checked as it is read: the file's
	// damage mark, its freelist and head record (at open) and every value
	// of the stored projection. The rest of the file is the scrub's to
	// read, in the background (scrubLoop), not a cost of every start.
	if _, _, err := hostjournal.StoredCore(j); err != nil {
		log.Error("the journal is damaged; not starting", "err", err)
		return err
	}
	if metrics != nil {
		if err := metrics.Attach(j); err != nil {
			return err
		}
	}
	started, err := j.Append(append([]event.Record{event.New(event.HostStarted, 0, "", hv.startedPayload())}, tightened...)...)
	if err != nil {
		return fmt.Errorf("record start: %w", err)
	}
	for _, r := range started[1:] {
		var p event.DirTightenedPayload
		_ = json.Unmarshal(r.Payload, &p)
		log.Warn("a directory of the host's was open to others: made 0700", "path", p.Path, "was", p.Was)
	}
	if err := hv.atStart(j); err != nil {
		return err
	}
	if c.Facts != nil {
		if _, err := recordFacts(j, c.Facts); err != nil {
			return err
		}
	}
	if linked && enrolled.AllowPlaintext {
		// Said at every start, in the log and the journal: a setting that
		// lets any server at the broker's address push declarations must
		// not be forgotten once set.
		const why = "link.json sets allow_plaintext: the broker is not authenticated, and whatever answers at its address can push declarations"
		log.Warn("the link runs without TLS", "urls", strings.Join(enrolled.URLs, ","), "reason", why)
		if _, err := j.Append(event.New(event.LinkPlaintext, 0, "", event.LinkPlaintextPayload{URLs: enrolled.URLs, Reason: why})); err != nil {
			return fmt.Errorf("record the plaintext link: %w", err)
		}
	}
	sock, err := localsock.Listen(c.SocketPath)
	if err != nil {
		return err
	}

	held := &Held{Journal: j, StateDir: c.StateDir, look: make(chan struct{}, 1)}
	giver := newGiver(j, c.ReturnHeap)
	defer giver.stop()
	host := NewLinkHost(held, c.Admit, c.Plan)
	var lnk *link.Link
	if linked {
		lnk, err = link.New(link.Config{
			Mesh: enrolled.Mesh, Node: enrolled.Node, URLs: enrolled.URLs, CredsFile: creds, Credentials: enrolment.NodeCreds{Path: creds}, Trust: enrolled.SigningKey,
			TLS: brokerTLS, AllowPlaintext: enrolled.AllowPlaintext,
			Version: hv.name(), Build: c.Build, HeartbeatInterval: c.HeartbeatInterval, PingInterval: c.PingInterval, Log: log.With("component", "link"),
		}, host, j)
		if err != nil {
			return refused("%s: %v", filepath.Join(c.StateDir, enrolment.LinkConfigFile), err)
		}
		held.reconciled = lnk.Reconciled
		log.Info("mesh-host serving", "version", hv.name(), "build", c.Build, "managed", hv.managed, "journal", j.Path(), "socket", c.SocketPath, "start_seq", started[0].Seq,
			"mesh", enrolled.Mesh, "node", enrolled.Node, "broker", strings.Join(enrolled.URLs, ","))
	} else {
		log.Info("mesh-host serving", "version", hv.name(), "build", c.Build, "managed", hv.managed, "journal", j.Path(), "socket", c.SocketPath, "start_seq", started[0].Seq,
			"link", "none: not enrolled, running offline")
	}

	var g run.Group
	{ // Damage found in the journal, by whatever read it, stops the service.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			select {
			case <-ctx.Done():
				return nil
			case <-j.DamageFound():
				err := j.Damage()
				log.Error("the journal is damaged; stopping", "err", err)
				return err
			}
		}, func(error) { cancel() })
	}
	// A compaction drops records; a scrub must not read them meanwhile.
	var maintenance sync.Mutex
	{ // The CLI's questions, answered from the journal this process holds.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return localsock.Serve(ctx, sock, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
				defer giver.giveBack()
				return c.Handler(ctx, args, stdout, stderr, held)
			})
		}, func(error) { cancel() })
	}
	{ // Reconcile at start (the machine may have changed while nothing ran,
		// or the last run stopped mid-apply), then on each declaration
		// accepted and on the drift timer.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return c.reconcileLoop(ctx, loopHooks{
				wake: host.wake,
				reconcile: func(ctx context.Context, trigger event.Trigger) (*agent.Result, error) {
					held.Reconciling.Lock()
					defer held.Reconciling.Unlock()
					return c.Reconcile(ctx, held.Journal, trigger)
				},
				done:     held.afterReconcile,
				between:  betweenReconciles(hv, held, log),
				look:     held.look,
				giveBack: giver.giveBack,
			}, log)
		}, func(error) { cancel() })
	}
	if c.Facts != nil { // The machine may change under the mesh: a reboot, a kernel, an address.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return factsLoop(ctx, j, c.DriftInterval, c.Facts, log)
		}, func(error) { cancel() })
	}
	if hv.managed { // A version delivered outside a reconcile (a package upgrade) asks for a look.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return watchVersions(ctx, hv.dir, held.look, log)
		}, func(error) { cancel() })
	}
	if c.Watch != nil { // Drift something tells of: a unit stopped by hand, repaired at once.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			watchLoop(ctx, func(ctx context.Context, drifted func()) error { return c.Watch(ctx, j, drifted) }, host.wake, log)
			return nil
		}, func(error) { cancel() })
	}
	if lnk != nil { // The link: pushes down, events and heartbeats up.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return lnk.Run(ctx)
		}, func(error) { cancel() })
	}
	{ // Retention: a quiet machine's journal must not grow without bound.
		// With a link, nothing the events stream has not acknowledged is
		// dropped.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return c.compactLoop(ctx, j, lnk != nil, &maintenance, log)
		}, func(error) { cancel() })
	}
	{ // The scrub: damage that appears in the file while the service runs
		// (a disk's, a person's) is found within a day, not when a record
		// it hit is next read.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return scrubLoop(ctx, j, c.ScrubInterval, &maintenance, log)
		}, func(error) { cancel() })
	}
	if metrics != nil { // The host's series, for Prometheus to scrape.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			if err := metrics.Serve(ctx, c.MetricsListener); err != nil {
				return fmt.Errorf("serve metrics on %s: %w", c.MetricsListener.Addr(), err)
			}
			return nil
		}, func(error) { cancel() })
	}
	{ // ctx ends (SIGINT, SIGTERM); then the group stops.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	if err := g.Run(); errors.Is(err, errStoodAside) {
		log.Info("mesh-host stood aside for a newer version; exiting 0 for the launcher to start it", "version", hv.name())
		return nil
	} else if err != nil {
		return err
	}
	log.Info("mesh-host stopped")
	return nil
}

// betweenReconciles is the reconcile loop's between: with no reconcile
// running (it holds the reconcile lock, so none a client asks for runs
// either), hv confirms and decides; standing aside is journaled, and ends
// the loop with errStoodAside.
func betweenReconciles(hv *hostVersion, held *Held, log *slog.Logger) func(completed bool) error {
	return func(completed bool) error {
		held.Reconciling.Lock()
		defer held.Reconciling.Unlock()
		aside, err := hv.between(completed)
		if errors.Is(err, journal.ErrClosed) {
			return nil
		}
		if hostjournal.IsDamage(err) {
			return err
		}
		if err != nil {
			log.Error("between reconciles", "err", err)
		}
		if aside == nil {
			return nil
		}
		if _, err := held.Journal.Append(event.New(event.VersionStoodAside, 0, "", *aside)); err != nil {
			// Not journaled, so not done: the next look tries again.
			log.Error("journal standing aside", "err", err)
			return nil
		}
		held.StandingAside = true
		log.Info("standing aside", "running", aside.Running, "newer", aside.Newer, "reason", aside.Reason)
		return errStoodAside
	}
}

func (c *Config) compactLoop(ctx context.Context, j *journal.Journal, requireAck bool, maintenance *sync.Mutex, log *slog.Logger) error {
	t := time.NewTicker(c.CompactEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		maintenance.Lock()
		res, err := j.Compact(journal.CompactOptions{Window: c.Retention, KeepLast: c.KeepLast, RequireAck: requireAck})
		maintenance.Unlock()
		if errors.Is(err, journal.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("compact journal: %w", err)
		}
		if res.Dropped > 0 {
			log.Info("journal compacted", "dropped", res.Dropped, "through", res.Through, "size_before", res.SizeBefore, "size_after", res.SizeAfter)
		}
	}
}

// loopHooks are what the reconcile loop is wired to.
type loopHooks struct {
	// wake carries the trigger of a declaration accepted.
	wake <-chan event.Trigger
	// reconcile runs one reconcile.
	reconcile func(context.Context, event.Trigger) (*agent.Result, error)
	// done is called after each completed reconcile (a heartbeat is due).
	done func()
	// between, when set, is called after each reconcile returns (completed
	// says whether it completed) and on each look, never during a
	// reconcile; an error ends the loop with it.
	between func(completed bool) error
	// look asks for a between with no reconcile of the loop's own: a
	// client's reconcile completed.
	look <-chan struct{}
	// giveBack, when set, is called after each reconcile and its between,
	// once its result is dropped.
	giveBack func()
}

// reconcileLoop reconciles at start, then on each trigger: a declaration
// accepted (pushed, reconnect; several during one apply make one reconcile
// of the latest) and the drift timer, which restarts after every reconcile.
// After each completed reconcile it calls done (a heartbeat goes up). A
// failing reconcile is journaled and logged; the loop goes on (it is what
// repairs), unless it failed on damage to the journal, which ends it. After
// each reconcile returns, and on each look, it calls between, which may end
// it (the host stands aside).
//
// When ctx ends, the reconcile in flight is not cancelled: it finishes and
// is journaled, unless it takes longer than StopTimeout more.
func (c *Config) reconcileLoop(ctx context.Context, h loopHooks, log *slog.Logger) error {
	trigger := event.TriggerStart
	timer := time.NewTimer(c.DriftInterval)
	defer timer.Stop()
	between := func(completed bool) error {
		if h.between == nil {
			return nil
		}
		return h.between(completed)
	}
	for {
		rctx, release := c.applyContext(ctx)
		res, err := h.reconcile(rctx, trigger)
		release()
		completed := false
		switch {
		case errors.Is(err, journal.ErrClosed):
			return nil
		case hostjournal.IsDamage(err):
			// Not retried: every reconcile would fail the same way, or
			// act on a state that cannot be trusted.
			return err
		case err != nil:
			log.Error("reconcile", "trigger", trigger, "err", err)
		default:
			if res.Started != 0 {
				log.Info("reconciled", "trigger", trigger, "changed", res.Changed, "unchanged", res.Unchanged, "failed", res.Failed)
			}
			h.done()
			completed = true
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := between(completed); err != nil {
			return err
		}
		if h.giveBack != nil {
			h.giveBack() // res is dropped by now
		}
		timer.Reset(c.DriftInterval)
	waiting:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				trigger = event.TriggerTimer
				break waiting
			case trigger = <-h.wake:
				break waiting
			case <-h.look:
				if err := between(false); err != nil {
					return err
				}
			}
		}
	}
}

// applyContext is the context of one reconcile: not ended by ctx ending
// (the service told to stop), so the apply in flight finishes and is
// journaled, but ended StopTimeout after that. release ends it.
func (c *Config) applyContext(ctx context.Context) (_ context.Context, release func()) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.StopTimeout, cancel)
		context.AfterFunc(rctx, func() { t.Stop() })
	})
	return rctx, func() {
		stop()
		cancel()
	}
}

// watchRetry is how long the service waits before it asks Watch again
// after it failed: a service manager restarting, a bus reconnecting.
const watchRetry = 30 * time.Second

// watchLoop runs watch until ctx ends, waking the reconcile loop with
// the watch trigger each time it says something drifted. A pending wake
// (a declaration accepted) is not replaced: its reconcile looks at
// everything anyway.
func watchLoop(ctx context.Context, watch func(context.Context, func()) error, wake chan event.Trigger, log *slog.Logger) {
	drifted := func() {
		select {
		case wake <- event.TriggerWatch:
		default:
		}
	}
	for {
		err := watch(ctx, drifted)
		if ctx.Err() != nil {
			return
		}
		log.Info("not watching for drift the service manager could tell of; the drift timer finds it", "err", err, "retry_in", watchRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
	}
}
