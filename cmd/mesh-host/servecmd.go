package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// serveCmd is the host service. It holds the journal, records its own
// start, answers the CLI over its socket, reconciles (at start, on a
// declaration accepted, on the drift timer), compacts the journal daily and,
// when the host is enrolled (STATE-DIR/link.json), runs the link to the
// control plane. Without an enrolment it runs offline.
//
// The journal is read whole at start and every ScrubInterval after. Damage
// found in it, at start or by anything while it runs (a reconcile, a
// command a client asked for, the link, the scrub), stops the service with
// the recovery message and exitDamaged: nothing is appended to a damaged
// journal, and a reconcile from it cannot be trusted.
//
// Between reconciles it looks after its own version (hostVersion): its
// first completed reconcile confirms it, and a newer version delivered, or
// its executable replaced, makes it stand aside: it journals
// version.stood-aside and exits 0, for the launcher to start the newer one.
type serveCmd struct {
	DriftInterval     time.Duration `name:"drift-interval" default:"10m" help:"How often to look for drift: change the mesh did not make."`
	CompactEvery      time.Duration `name:"compact-every" default:"24h" help:"How often to drop records older than the retention window."`
	Retention         time.Duration `name:"retention" default:"2160h" help:"Keep records at least this long (default 90 days)."`
	KeepLast          uint64        `name:"keep-last" default:"100000" help:"Keep at least this many newest records."`
	StopTimeout       time.Duration `name:"stop-timeout" default:"60s" help:"On SIGTERM or SIGINT, how long an apply in flight may go on to finish before it is cancelled."`
	HeartbeatInterval time.Duration `name:"heartbeat-interval" default:"60s" help:"How often to report to the control plane while idle (when enrolled)."`
	ScrubInterval     time.Duration `name:"scrub-interval" default:"24h" help:"How often to re-read the whole journal for damage (journaled as journal.scrubbed; damage stops the service)."`
}

func (c *serveCmd) Run(e *env) error {
	if e.held != nil {
		return refused("serve cannot be asked of a running service")
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	if !filepath.IsAbs(e.cli.Versions) {
		return refused("--versions %s: a path under --root must be absolute", e.cli.Versions)
	}
	// Which executable this is, before anything could replace it.
	hv := resolveVersion(version, e.cli.Root, e.cli.Versions, e.cli.StateDir, log)
	enrolled, creds, linked, err := enrolment(e.cli.StateDir)
	if err != nil {
		return refused("%v", err)
	}
	var brokerTLS *tls.Config
	if linked {
		if brokerTLS, err = linkTLS(e.cli.StateDir, enrolled); err != nil {
			return refused("%v", err)
		}
	}
	tightened, err := tightenDirs(e.cli.StateDir, filepath.Dir(e.cli.socketPath()))
	if err != nil {
		return failed("%v", err)
	}
	j, err := openJournal(e.cli.journalPath())
	if err != nil {
		return failed("%v", err)
	}
	defer j.Close()
	if err := verifyJournal(j); err != nil {
		log.Error("the journal is damaged; not starting", "err", err)
		return failed("%w", err)
	}
	started, err := j.Append(append([]event.Record{event.New(event.HostStarted, 0, "", hv.startedPayload())}, tightened...)...)
	if err != nil {
		return failed("record start: %v", err)
	}
	for _, r := range started[1:] {
		var p event.DirTightenedPayload
		_ = json.Unmarshal(r.Payload, &p)
		log.Warn("a directory of the host's was open to others: made 0700", "path", p.Path, "was", p.Was)
	}
	if err := hv.atStart(j); err != nil {
		return failed("%v", err)
	}
	if linked && enrolled.AllowPlaintext {
		// Said at every start, in the log and the journal: a setting that
		// lets any server at the broker's address push declarations must
		// not be forgotten once set.
		const why = "link.json sets allow_plaintext: the broker is not authenticated, and whatever answers at its address can push declarations"
		log.Warn("the link runs without TLS", "urls", strings.Join(enrolled.URLs, ","), "reason", why)
		if _, err := j.Append(event.New(event.LinkPlaintext, 0, "", event.LinkPlaintextPayload{URLs: enrolled.URLs, Reason: why})); err != nil {
			return failed("record the plaintext link: %v", err)
		}
	}
	sock, err := localsock.Listen(e.cli.socketPath())
	if err != nil {
		return failed("%v", err)
	}

	held := &heldJournal{j: j, look: make(chan struct{}, 1), stateDir: e.cli.StateDir}
	host := newLinkHost(e, held)
	var lnk *link.Link
	if linked {
		lnk, err = link.New(link.Config{
			Mesh: enrolled.Mesh, Node: enrolled.Node, URLs: enrolled.URLs, CredsFile: creds, Credentials: nodeCreds{path: creds}, Trust: enrolled.SigningKey,
			TLS: brokerTLS, AllowPlaintext: enrolled.AllowPlaintext,
			Version: hv.name(), Build: version, HeartbeatInterval: c.HeartbeatInterval, Log: log.With("component", "link"),
		}, host, j)
		if err != nil {
			return refused("%s: %v", filepath.Join(e.cli.StateDir, linkConfigFile), err)
		}
		held.reconciled = lnk.Reconciled
		log.Info("mesh-host serving", "version", hv.name(), "build", version, "managed", hv.managed, "journal", j.Path(), "socket", e.cli.socketPath(), "start_seq", started[0].Seq,
			"mesh", enrolled.Mesh, "node", enrolled.Node, "broker", strings.Join(enrolled.URLs, ","))
	} else {
		log.Info("mesh-host serving", "version", hv.name(), "build", version, "managed", hv.managed, "journal", j.Path(), "socket", e.cli.socketPath(), "start_seq", started[0].Seq,
			"link", "none: not enrolled, running offline")
	}

	var g run.Group
	{ // Damage found in the journal, by whatever read it, stops the service.
		ctx, cancel := context.WithCancel(e.ctx)
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
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return localsock.Serve(ctx, sock, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
				return runCLI(ctx, args, stdout, stderr, held)
			})
		}, func(error) { cancel() })
	}
	{ // Reconcile at start (the machine may have changed while nothing ran,
		// or the last run stopped mid-apply), then on each declaration
		// accepted and on the drift timer.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return c.reconcileLoop(ctx, loopHooks{
				wake: host.wake,
				reconcile: func(ctx context.Context, trigger event.Trigger) (*agent.Result, error) {
					held.reconciling.Lock()
					defer held.reconciling.Unlock()
					re := *e
					re.ctx = ctx
					return re.reconcileStored(held.j, trigger, true)
				},
				done:    held.afterReconcile,
				between: betweenReconciles(hv, held, log),
				look:    held.look,
			}, log)
		}, func(error) { cancel() })
	}
	if hv.managed { // A version delivered outside a reconcile (a package upgrade) asks for a look.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return watchVersions(ctx, hv.dir, held.look, log)
		}, func(error) { cancel() })
	}
	if lnk != nil { // The link: pushes down, events and heartbeats up.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return lnk.Run(ctx)
		}, func(error) { cancel() })
	}
	{ // Retention: a quiet machine's journal must not grow without bound.
		// With a link, nothing the events stream has not acknowledged is
		// dropped.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return c.compactLoop(ctx, j, lnk != nil, &maintenance, log)
		}, func(error) { cancel() })
	}
	{ // The scrub: damage that appears in the file while the service runs
		// (a disk's, a person's) is found within a day, not when a record
		// it hit is next read.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return scrubLoop(ctx, j, c.ScrubInterval, &maintenance, log)
		}, func(error) { cancel() })
	}
	{ // SIGINT and SIGTERM end e.ctx; then the group stops.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	if err := g.Run(); errors.Is(err, errStoodAside) {
		log.Info("mesh-host stood aside for a newer version; exiting 0 for the launcher to start it", "version", hv.name())
		return nil
	} else if err != nil {
		return failed("%v", err)
	}
	log.Info("mesh-host stopped")
	return nil
}

// betweenReconciles is the reconcile loop's between: with no reconcile
// running (it holds the reconcile lock, so none a client asks for runs
// either), hv confirms and decides; standing aside is journaled, and ends
// the loop with errStoodAside.
func betweenReconciles(hv *hostVersion, held *heldJournal, log *slog.Logger) func(completed bool) error {
	return func(completed bool) error {
		held.reconciling.Lock()
		defer held.reconciling.Unlock()
		aside, err := hv.between(completed)
		if errors.Is(err, journal.ErrClosed) {
			return nil
		}
		if isDamage(err) {
			return err
		}
		if err != nil {
			log.Error("between reconciles", "err", err)
		}
		if aside == nil {
			return nil
		}
		if _, err := held.j.Append(event.New(event.VersionStoodAside, 0, "", *aside)); err != nil {
			// Not journaled, so not done: the next look tries again.
			log.Error("journal standing aside", "err", err)
			return nil
		}
		held.standingAside = true
		log.Info("standing aside", "running", aside.Running, "newer", aside.Newer, "reason", aside.Reason)
		return errStoodAside
	}
}

// enrolment reads the link's configuration and checks the credentials
// beside it; linked is false when the host is not enrolled.
func enrolment(dir string) (cfg linkConfig, creds string, linked bool, err error) {
	cfg, err = readLinkConfig(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, "", false, nil
	}
	if err != nil {
		return cfg, "", false, err
	}
	creds = filepath.Join(dir, credsFile)
	if err := checkCreds(creds); err != nil {
		return cfg, "", false, err
	}
	return cfg, creds, true, nil
}

func (c *serveCmd) compactLoop(ctx context.Context, j *journal.Journal, requireAck bool, maintenance *sync.Mutex, log *slog.Logger) error {
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
func (c *serveCmd) reconcileLoop(ctx context.Context, h loopHooks, log *slog.Logger) error {
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
		case isDamage(err):
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
func (c *serveCmd) applyContext(ctx context.Context) (_ context.Context, release func()) {
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
