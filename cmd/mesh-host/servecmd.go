package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/tuning"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/facts"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/drivers/unit"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// serveCmd runs the host service (service.Run says what it does) as the
// flags tell it. Damage to the journal stops it with exitDamaged; standing
// aside for a newer version exits 0, for the launcher to start that one;
// a refused enrolment is exit 2.
type serveCmd struct {
	DriftInterval     time.Duration `name:"drift-interval" default:"10m" help:"How often to look for drift: change the mesh did not make."`
	CompactEvery      time.Duration `name:"compact-every" default:"24h" help:"How often to drop records older than the retention window."`
	Retention         time.Duration `name:"retention" default:"2160h" help:"Keep records at least this long (default 90 days)."`
	KeepLast          uint64        `name:"keep-last" default:"100000" help:"Keep at least this many newest records."`
	StopTimeout       time.Duration `name:"stop-timeout" default:"60s" help:"On SIGTERM or SIGINT, how long an apply in flight may go on to finish before it is cancelled."`
	HeartbeatInterval time.Duration `name:"heartbeat-interval" default:"60s" help:"How often to report to the control plane while idle (when enrolled)."`
	PingInterval      time.Duration `name:"ping-interval" default:"20s" help:"How often to ask the broker whether it still answers; when two go unanswered, the next tick ends the link and it reconnects (40-60 s at the default). (A dead network path nothing answers on is noticed by TCP keepalives in about 30 s whatever this is.)"`
	ScrubInterval     time.Duration `name:"scrub-interval" default:"24h" help:"How often to re-read the whole journal for damage (journaled as journal.scrubbed; damage stops the service)."`
	MetricsListen     string        `name:"metrics-listen" placeholder:"ADDR" help:"Serve the host's Prometheus series on http://ADDR/metrics (e.g. 127.0.0.1:9464); off when not given. Plain HTTP: bind it to loopback or a private address (the series carry no secrets)."`
}

func (c *serveCmd) Run(e *env) error {
	if e.held != nil {
		return command.Refused("serve cannot be asked of a running service")
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	// The service lives beside the machine's workload: Go's default pace,
	// not a short command's (see main). It gives back what a reconcile
	// took when it ends (ReturnHeap).
	tuning.HostService()
	if !filepath.IsAbs(e.cli.Versions) {
		return command.Refused("--versions %s: a path under --root must be absolute", e.cli.Versions)
	}
	// Opened here, before anything starts: an address in use is a
	// refusal, not a service that runs without the metrics it was asked
	// for.
	var metricsListener net.Listener
	if c.MetricsListen != "" {
		ln, err := net.Listen("tcp", c.MetricsListen)
		if err != nil {
			return command.Refused("--metrics-listen %s: %v", c.MetricsListen, err)
		}
		metricsListener = ln
	}
	err := service.Run(e.ctx, service.Config{
		Build:             version,
		Root:              e.cli.Root,
		Versions:          e.cli.Versions,
		StateDir:          e.cli.StateDir,
		JournalPath:       e.cli.journalPath(),
		SocketPath:        e.cli.socketPath(),
		DriftInterval:     c.DriftInterval,
		CompactEvery:      c.CompactEvery,
		Retention:         c.Retention,
		KeepLast:          c.KeepLast,
		StopTimeout:       c.StopTimeout,
		HeartbeatInterval: c.HeartbeatInterval,
		PingInterval:      c.PingInterval,
		ScrubInterval:     c.ScrubInterval,
		MetricsListener:   metricsListener,
		Log:               log,
		// The CLI's questions, answered from the journal the service holds.
		Handler: func(ctx context.Context, args []string, stdout, stderr io.Writer, held *service.Held) int {
			return runCLI(ctx, args, stdout, stderr, held)
		},
		Reconcile: func(ctx context.Context, j *journal.Journal, trigger event.Trigger) (*agent.Result, error) {
			re := *e
			re.ctx = ctx
			return re.reconcileStored(j, trigger, true)
		},
		Admit: e.admissible,
		Plan: func(ctx context.Context, j *journal.Journal, d *declaration.Declaration) (*service.Planned, error) {
			re := *e
			re.ctx = ctx
			return re.planStored(j, d)
		},
		Facts:      func() event.HostFactsPayload { return facts.Gather(e.cli.Root, version) },
		Watch:      e.watchUnits,
		ReturnHeap: heapReturner.Request,
	})
	if errors.Is(err, service.ErrRefused) {
		return command.Refused("%v", err)
	} else if err != nil {
		return failed("%v", err)
	}
	return nil
}

// watchUnits tells the service when a unit the declaration in force
// declares stops, where a service manager can say so (unit.Driver.Watch):
// `active: true` is then repaired at once. Units the mesh does not
// declare come and go unremarked.
func (e *env) watchUnits(ctx context.Context, j *journal.Journal, drifted func()) error {
	root, err := rootfs.Open(e.cli.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	d := unit.New(root, unit.Options{})
	defer d.Close()
	return d.Watch(ctx, func(name string) {
		// The declaration alone, not the whole stored state: a stop of
		// any unit of the machine comes here.
		var desired *projector.Desired
		err := j.Projection(func(v journal.View, _ uint64) error {
			var err error
			desired, err = projector.LoadDesired(v)
			return err
		})
		if err != nil || desired == nil {
			return
		}
		id := drivers.ID(&drivers.UnitSpec{Name: name})
		if slices.ContainsFunc(desired.Resources, func(r event.DeclaredResource) bool { return r.ID == id }) {
			drifted()
		}
	})
}
