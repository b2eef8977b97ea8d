package unit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/mesh-host/mesh-host/drivers"
)

// This file is the unit's side that lives in the service manager, reached
// over its D-Bus interface: states are properties, changes are jobs.

// manager returns the connection to the service manager, opening it if
// need be: systemd's private socket, which needs no bus daemon, else the
// system bus. The connection outlives ctx, which bounds only the opening.
func (d *Driver) manager(ctx context.Context) (*sdbus.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil && d.conn.Connected() {
		return d.conn, nil
	}
	if d.conn != nil {
		d.conn.Close() // the manager went away (re-executed, say): connect again
		d.conn = nil
	}
	type opened struct {
		conn *sdbus.Conn
		err  error
	}
	result := make(chan opened, 1)
	go func() {
		conn, err := sdbus.NewConnection(func() (*godbus.Conn, error) { return dialPrivate(ctx) })
		if err == nil || ctx.Err() != nil {
			result <- opened{conn, err}
			return
		}
		// The connection's context is its lifetime: a godbus connection
		// closes when its context ends, so it cannot be the call's.
		conn, err2 := sdbus.NewSystemConnectionContext(context.Background())
		if err2 == nil {
			// On the bus, the manager tells of jobs ending only to
			// those who subscribed; on its private socket, to everyone.
			if err2 = conn.Subscribe(); err2 != nil {
				conn.Close()
			}
		}
		if err2 != nil {
			result <- opened{nil, fmt.Errorf("%w: connect to systemd at %s: %w; on the system bus: %w", ErrManager, privateSocket, err, err2)}
			return
		}
		result <- opened{conn, nil}
	}()
	select {
	case r := <-result:
		if r.err != nil {
			return nil, r.err
		}
		d.conn = r.conn
		return d.conn, nil
	case <-ctx.Done():
		go func() {
			if r := <-result; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("%w: connect: %w", ErrManager, context.Cause(ctx))
	}
}

// privateSocket is systemd's own D-Bus socket: root's, and answered
// without a bus daemon.
const privateSocket = "/run/systemd/private"

// primeEvery is how long the first call on a new connection to the private
// socket waits for its answer before it is sent again.
const primeEvery = 100 * time.Millisecond

// dialPrivate connects to the manager's private socket and authenticates.
// Closing the connection is the caller's; ctx bounds only the opening.
//
// systemd 252 (Debian 12) can leave a message that arrives right behind
// the handshake unread until another arrives, and the first call would
// then wait forever. So the connection is primed: a Ping, sent again until
// one is answered.
func dialPrivate(ctx context.Context) (*godbus.Conn, error) {
	conn, err := godbus.Dial("unix:path=" + privateSocket)
	if err != nil {
		return nil, err
	}
	// Neither the handshake nor a call waits past ctx: the connection is
	// closed under them.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := conn.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, orCause(ctx, err)
	}
	manager := conn.Object("org.freedesktop.systemd1", managerPath)
	for {
		pctx, cancel := context.WithTimeout(ctx, primeEvery)
		err := manager.CallWithContext(pctx, "org.freedesktop.DBus.Peer.Ping", 0).Err
		cancel()
		switch {
		case err == nil && stop():
			return conn, nil // and ctx no longer closes it
		case err == nil:
			return nil, context.Cause(ctx)
		case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			continue
		}
		conn.Close()
		return nil, orCause(ctx, err)
	}
}

// orCause is ctx's cause when ctx ended, else err.
func orCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// callErr is the error of a call to the manager about unit name: ctx's
// cause when ctx ended (so that a timeout says drivers.ErrTimeout), else the
// manager's words.
func callErr(ctx context.Context, name, what string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("unit %s: %s: %w", name, what, context.Cause(ctx))
	}
	return fmt.Errorf("unit %s: %w: %s: %w", name, ErrManager, what, err)
}

// props are the properties of a unit the driver reads from the manager.
// Not UnitFileState: the manager works it out once and keeps it until it
// reloads, and systemctl --root enables without a reload; enablement is
// what systemctl --root is-enabled says of the files.
type props struct {
	LoadState, ActiveState, SubState, FragmentPath string
	NeedDaemonReload, CanReload                    bool
	// ActiveEnter and InactiveExit are when the unit last became active
	// and last began to start; zero when never.
	ActiveEnter, InactiveExit time.Time
}

// active is whether the unit runs or is on its way: active, reloading,
// activating; not a unit waiting to be restarted after it failed
// (activating, auto-restart), which a start makes start now.
func (p *props) active() bool {
	switch p.ActiveState {
	case "active", "reloading":
		return true
	case "activating":
		return p.SubState != "auto-restart"
	}
	return false
}

// failed is whether the unit failed: as it stands, or waiting to be
// restarted after it failed.
func (p *props) failed() bool {
	return p.ActiveState == "failed" || p.SubState == "auto-restart"
}

// props reads the unit's properties. Asking for a unit the manager has
// not loaded loads it, from the files as they are now.
func (d *Driver) props(ctx context.Context, name string) (*props, error) {
	conn, err := d.manager(ctx)
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", name, err)
	}
	m, err := conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return nil, callErr(ctx, name, "read its properties", err)
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	flag := func(k string) bool { b, _ := m[k].(bool); return b }
	return &props{
		LoadState:        str("LoadState"),
		ActiveState:      str("ActiveState"),
		SubState:         str("SubState"),
		FragmentPath:     str("FragmentPath"),
		NeedDaemonReload: flag("NeedDaemonReload"),
		CanReload:        flag("CanReload"),
		ActiveEnter:      usec(m["ActiveEnterTimestamp"]),
		InactiveExit:     usec(m["InactiveExitTimestamp"]),
	}, nil
}

// usec is a manager's timestamp (µs since the epoch; 0 for never) as a
// time.
func usec(v any) time.Time {
	u, _ := v.(uint64)
	if u == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(u))
}

// reloadFor is the batch's second pass: one daemon-reload if any unit the
// first pass touched, or that is to be started or stopped, needs one.
func (d *Driver) reloadFor(ctx context.Context, changes []*change) {
	var touched []*change
	var why []string
	for _, c := range changes {
		if c.err != nil || !c.touches() {
			continue
		}
		rctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
		yes, err := d.needsReload(rctx, c.spec.Name, c.wrote || c.before.exists(), c.wrote)
		cancel()
		if err != nil {
			c.err = err
			continue
		}
		touched = append(touched, c)
		if yes {
			why = append(why, c.spec.Name)
		}
	}
	if len(why) == 0 {
		return
	}
	rctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	if err := d.daemonReload(rctx, strings.Join(why, ", ")); err != nil {
		for _, c := range touched {
			c.err = err
		}
	}
}

// touches is whether the batch does anything to the unit: wrote its
// file, changed its enablement, or is to start or stop it.
func (c *change) touches() bool {
	if c.changed {
		return true
	}
	rt := c.before.rt
	return rt != nil && rt.active() != c.spec.Active
}

// needsReload is whether the manager must reload before it acts on the
// unit name: it says so; or it has not loaded the unit although its file
// is there (installed); or it holds the unit other than loaded although
// the host just wrote its file (wrote: over a mask, say). For a template,
// whether any of its loaded instances needs it.
func (d *Driver) needsReload(ctx context.Context, name string, installed, wrote bool) (bool, error) {
	if !isTemplate(name) {
		rt, err := d.props(ctx, name)
		if err != nil {
			return false, err
		}
		return rt.NeedDaemonReload || installed && rt.LoadState == "not-found" || wrote && rt.LoadState != "loaded", nil
	}
	instances, err := d.instances(ctx, name)
	if err != nil {
		return false, err
	}
	for _, u := range instances {
		rt, err := d.props(ctx, u.Name)
		if err != nil {
			return false, err
		}
		if rt.NeedDaemonReload {
			return true, nil
		}
	}
	return false, nil
}

// instances are the loaded instances of the template name.
func (d *Driver) instances(ctx context.Context, template string) ([]sdbus.UnitStatus, error) {
	conn, err := d.manager(ctx)
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", template, err)
	}
	ext := path.Ext(template)
	units, err := conn.ListUnitsByPatternsContext(ctx, nil, []string{strings.TrimSuffix(template, ext) + "*" + ext})
	if err != nil {
		return nil, callErr(ctx, template, "list its instances", err)
	}
	return units, nil
}

// daemonReload reloads the manager (systemctl daemon-reload), which
// answers once it has. why names the units that need it.
func (d *Driver) daemonReload(ctx context.Context, why string) error {
	conn, err := d.manager(ctx)
	if err != nil {
		return fmt.Errorf("unit %s: %w", why, err)
	}
	if err := conn.ReloadContext(ctx); err != nil {
		return callErr(ctx, why, "daemon-reload", err)
	}
	return nil
}

// run is the batch's last pass for one unit: start, restart (an active
// unit whose file changed) or stop it as its spec says.
func (d *Driver) run(ctx context.Context, c *change) error {
	s := c.spec
	if isTemplate(s.Name) {
		return nil
	}
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	rt, err := d.props(ctx, s.Name)
	if err != nil {
		return err
	}
	var verb string
	switch {
	case s.Active && !rt.active():
		verb = "start"
	case s.Active && c.wrote:
		verb = "restart"
	case !s.Active && rt.active():
		verb = "stop"
	default:
		return nil
	}
	if err := d.job(ctx, verb, s.Name); err != nil {
		return err
	}
	c.changed = true
	return nil
}

// jobs are the manager's calls that queue a job, by verb.
var jobs = map[string]func(c *sdbus.Conn, ctx context.Context, name, mode string, ch chan<- string) (int, error){
	"start":             (*sdbus.Conn).StartUnitContext,
	"stop":              (*sdbus.Conn).StopUnitContext,
	"restart":           (*sdbus.Conn).RestartUnitContext,
	"reload":            (*sdbus.Conn).ReloadUnitContext,
	"reload-or-restart": (*sdbus.Conn).ReloadOrRestartUnitContext,
}

// job has the manager run a job on the unit and waits for its result
// (done, canceled, timeout, failed, dependency, skipped) until ctx ends;
// only done is success. A unit that fails as it starts (the job is done
// once a simple service's process is forked) fails the job too. The error
// of a job that runs the unit carries its last journal lines.
func (d *Driver) job(ctx context.Context, verb, name string) error {
	conn, err := d.manager(ctx)
	if err != nil {
		return fmt.Errorf("unit %s: %w", name, err)
	}
	// Buffered: the connection hands the result over from the goroutine
	// that reads every signal, which must not wait for this one.
	result := make(chan string, 1)
	if _, err := jobs[verb](conn, ctx, name, "replace", result); err != nil {
		err = callErr(ctx, name, verb, err)
		var refused godbus.Error
		if verb != "stop" && errors.As(err, &refused) {
			err = fmt.Errorf("%w; %s", err, d.journal(ctx, name))
		}
		return err
	}
	select {
	case res := <-result:
		if res != "done" {
			return d.jobFailed(ctx, verb, name, fmt.Sprintf("the job ended %q", res))
		}
	case <-ctx.Done():
		return fmt.Errorf("unit %s: waiting for the %s job: %w", name, verb, context.Cause(ctx))
	}
	if verb == "stop" {
		return nil
	}
	rt, err := d.props(ctx, name)
	if err != nil {
		return err
	}
	if rt.failed() {
		return d.jobFailed(ctx, verb, name, fmt.Sprintf("the job was done, then the unit failed (%s/%s)", rt.ActiveState, rt.SubState))
	}
	return nil
}

// jobFailed is the error of a job that did not succeed: what happened and,
// but for a stop, the unit's last journal lines.
func (d *Driver) jobFailed(ctx context.Context, verb, name, what string) error {
	err := fmt.Errorf("unit %s: %s: %w: %s", name, verb, ErrJobFailed, what)
	if verb == "stop" {
		return err
	}
	return fmt.Errorf("%w; %s", err, d.journal(ctx, name))
}

// stopAll stops the unit name if it is active, and for a template every
// instance of it that is; a unit left failed is reset, so that the
// manager forgets a unit whose file goes.
func (d *Driver) stopAll(ctx context.Context, name string) error {
	names := []string{name}
	if isTemplate(name) {
		units, err := d.instances(ctx, name)
		if err != nil {
			return err
		}
		names = names[:0]
		for _, u := range units {
			names = append(names, u.Name)
		}
	}
	for _, n := range names {
		rt, err := d.props(ctx, n)
		if err != nil {
			return err
		}
		if rt.active() {
			if err := d.job(ctx, "stop", n); err != nil {
				return err
			}
			if rt, err = d.props(ctx, n); err != nil {
				return err
			}
		}
		if rt.ActiveState == "failed" {
			conn, err := d.manager(ctx)
			if err != nil {
				return fmt.Errorf("unit %s: %w", n, err)
			}
			if err := conn.ResetFailedUnitContext(ctx, n); err != nil {
				return callErr(ctx, n, "reset-failed", err)
			}
		}
	}
	return nil
}

// refreshes are how a unit is refreshed (UnitSpec.Refresh): the job, and
// what it did.
var refreshes = map[string]struct{ verb, did string }{
	"":                             {"restart", "restarted"},
	drivers.RefreshRestart:         {"restart", "restarted"},
	drivers.RefreshReload:          {"reload", "reloaded"},
	drivers.RefreshReloadOrRestart: {"reload-or-restart", ""},
}

// Refresh restarts or reloads the unit (UnitSpec.Refresh; restart by
// default) because something it listens to changed at since. A unit that
// does not run is not started; one that started at or after since already
// runs with the change; neither is touched, and the note says why. The
// manager is reloaded first if it says the unit needs it. Where no manager
// runs there is nothing to refresh.
func (d *Driver) Refresh(ctx context.Context, spec drivers.Spec, since time.Time) (drivers.Refreshed, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Refreshed{}, err
	}
	how, ok := refreshes[s.Refresh]
	if !ok {
		return drivers.Refreshed{}, fmt.Errorf("unit %s: %w: refresh %q: want restart, reload or reload-or-restart", s.Name, drivers.ErrInvalidSpec, s.Refresh)
	}
	if !d.managerRunning() {
		return drivers.Refreshed{Note: "no service manager runs in " + d.root.Dir() + ": nothing to refresh"}, nil
	}
	if isTemplate(s.Name) {
		return drivers.Refreshed{Note: "a template never runs: its instances are refreshed"}, nil
	}
	done, err := d.turn.Take(ctx)
	if err != nil {
		return drivers.Refreshed{}, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	defer done()
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	rt, err := d.props(ctx, s.Name)
	if err != nil {
		return drivers.Refreshed{}, err
	}
	if !rt.active() {
		return drivers.Refreshed{Note: "not running: a refresh does not start it"}, nil
	}
	if started := d.started(ctx, s.Name, rt); !started.Before(since) {
		return drivers.Refreshed{Note: "started at " + started.UTC().Format(time.RFC3339Nano) + ", after the change"}, nil
	}
	if rt.NeedDaemonReload {
		if err := d.daemonReload(ctx, s.Name); err != nil {
			return drivers.Refreshed{}, err
		}
	}
	did := how.did
	if did == "" {
		did = "restarted"
		if rt.CanReload {
			did = "reloaded"
		}
	}
	if err := d.job(ctx, how.verb, s.Name); err != nil {
		return drivers.Refreshed{}, err
	}
	return drivers.Refreshed{Did: did}, nil
}

// started is when the unit last started: the latest of when it began to
// start, became active, and (a service) its main process started.
func (d *Driver) started(ctx context.Context, name string, rt *props) time.Time {
	t := rt.ActiveEnter
	if rt.InactiveExit.After(t) {
		t = rt.InactiveExit
	}
	if path.Ext(name) != ".service" {
		return t
	}
	conn, err := d.manager(ctx)
	if err != nil {
		return t
	}
	// Best effort: a service's main process restarted by the manager
	// itself (Restart=) started again without the unit leaving its
	// active states.
	if p, err := conn.GetServicePropertyContext(ctx, name, "ExecMainStartTimestamp"); err == nil {
		if main := usec(p.Value.Value()); main.After(t) {
			t = main
		}
	}
	return t
}
