package unit

import (
	"context"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	godbus "github.com/godbus/dbus/v5"
)

// coalesce is how long Watch gathers the units that stopped before it
// tells of them: a burst (a target stopping fifty units) is told once,
// at most one telling a coalesce, and a unit stopped by hand is still
// told of well within the second the host has to repair it.
const coalesce = 200 * time.Millisecond

// The manager's D-Bus names Watch listens with.
const (
	managerPath      = "/org/freedesktop/systemd1"
	managerInterface = "org.freedesktop.systemd1.Manager"
	unitPathPrefix   = "/org/freedesktop/systemd1/unit/"
	unitInterface    = "org.freedesktop.systemd1.Unit"
	propertiesSignal = "org.freedesktop.DBus.Properties.PropertiesChanged"
)

// Watch calls changed with the name of each unit that stops or fails (its
// ActiveState leaves active, activating and reloading), as the manager
// announces it, until ctx ends or the connection to the manager does; it
// returns why it stopped. Units that stop together are told of together,
// each once, a coalesce after the first; changed is called one unit at a
// time, and the next signals wait for it to return. The watch holds a connection to
// the manager of its own, for as long as it runs. Where no manager runs it
// returns ErrNoManager at once: the host's drift timer is then all there
// is.
func (d *Driver) Watch(ctx context.Context, changed func(key string)) error {
	if !d.managerRunning() {
		return fmt.Errorf("unit driver: watch: %w in %s: only the drift timer finds a unit that stopped", ErrNoManager, d.root.Dir())
	}
	conn, err := watchConn(ctx)
	if err != nil {
		return fmt.Errorf("unit driver: watch: %w", err)
	}
	defer conn.Close()
	// Closed when ctx ends, the connection closes signals, and nothing
	// the loop waits for outlives ctx.
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	signals := make(chan *godbus.Signal, 1024)
	conn.Signal(signals)
	// What each unit was, so that a unit is told of when it stops, not
	// at every change of a unit already stopped (loading one that is not
	// installed, to look at it, announces it inactive).
	var units [][]any
	call := conn.Object("org.freedesktop.systemd1", managerPath).CallWithContext(ctx, managerInterface+".ListUnits", 0)
	if err := call.Store(&units); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("unit driver: watch: %w", context.Cause(ctx))
		}
		return fmt.Errorf("unit driver: watch: %w: list units: %w", ErrManager, err)
	}
	was := make(map[string]string, len(units))
	for _, u := range units {
		if len(u) > 3 {
			name, _ := u[0].(string)
			state, _ := u[3].(string)
			was[name] = state
		}
	}
	return watchLoop(ctx, signals, was, changed)
}

// watchLoop tells changed of the units that stop, as signals say, was
// holding what each unit was.
func watchLoop(ctx context.Context, signals <-chan *godbus.Signal, was map[string]string, changed func(string)) error {
	pending := make(map[string]bool)
	var flush <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("unit driver: watch: %w", context.Cause(ctx))
		case sig, ok := <-signals:
			if !ok {
				if ctx.Err() != nil {
					return fmt.Errorf("unit driver: watch: %w", context.Cause(ctx))
				}
				return fmt.Errorf("unit driver: watch: %w: the connection to the service manager closed", ErrManager)
			}
			if name, gone := unitRemoved(sig); gone {
				delete(was, name)
				continue
			}
			name, state, ok := unitState(sig)
			if !ok {
				continue
			}
			before := was[name]
			was[name] = state
			if running(before) && !running(state) {
				pending[name] = true
				if flush == nil {
					flush = time.After(coalesce)
				}
			}
		case <-flush:
			flush = nil
			names := make([]string, 0, len(pending))
			for name := range pending {
				names = append(names, name)
			}
			clear(pending)
			slices.Sort(names)
			for _, name := range names {
				changed(name)
			}
		}
	}
}

// running is whether an ActiveState is one a unit stops from.
func running(state string) bool {
	return state == "active" || state == "activating" || state == "reloading"
}

// unitState reads a unit's name and ActiveState from a PropertiesChanged
// signal of the manager's that carries it.
func unitState(sig *godbus.Signal) (name, state string, ok bool) {
	if sig.Name != propertiesSignal || len(sig.Body) < 2 || !strings.HasPrefix(string(sig.Path), unitPathPrefix) {
		return "", "", false
	}
	if iface, _ := sig.Body[0].(string); iface != unitInterface {
		return "", "", false
	}
	props, _ := sig.Body[1].(map[string]godbus.Variant)
	v, found := props["ActiveState"]
	if !found {
		return "", "", false
	}
	state, ok = v.Value().(string)
	if !ok {
		return "", "", false
	}
	name, ok = unescapePath(strings.TrimPrefix(string(sig.Path), unitPathPrefix))
	return name, state, ok
}

// unitRemoved reads the name of a unit the manager unloaded.
func unitRemoved(sig *godbus.Signal) (string, bool) {
	if sig.Name != managerInterface+".UnitRemoved" || len(sig.Body) < 1 {
		return "", false
	}
	name, ok := sig.Body[0].(string)
	return name, ok
}

// unescapePath is a unit's name from the last element of its object path,
// where the manager writes each byte that is not a letter or digit (and
// a leading digit) as _ and two hex digits.
func unescapePath(e string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] != '_' {
			b.WriteByte(e[i])
			continue
		}
		if i+3 > len(e) {
			return "", false
		}
		c, err := hex.DecodeString(e[i+1 : i+3])
		if err != nil {
			return "", false
		}
		b.Write(c)
		i += 2
	}
	return b.String(), b.Len() > 0
}

// watchConn connects to the manager for signals: its private socket, to
// which it sends every signal, else the system bus, where it sends them
// only to subscribers.
func watchConn(ctx context.Context) (*godbus.Conn, error) {
	conn, err := dialPrivate(ctx)
	if err == nil {
		return conn, nil
	}
	conn, err2 := godbus.ConnectSystemBus(godbus.WithContext(ctx))
	if err2 == nil {
		err2 = conn.AddMatchSignalContext(ctx, godbus.WithMatchInterface("org.freedesktop.DBus.Properties"), godbus.WithMatchMember("PropertiesChanged"), godbus.WithMatchPathNamespace(godbus.ObjectPath(strings.TrimSuffix(unitPathPrefix, "/"))))
		if err2 == nil {
			err2 = conn.AddMatchSignalContext(ctx, godbus.WithMatchInterface(managerInterface), godbus.WithMatchMember("UnitRemoved"))
		}
		if err2 == nil {
			err2 = conn.Object("org.freedesktop.systemd1", managerPath).CallWithContext(ctx, managerInterface+".Subscribe", 0).Err
		}
		if err2 != nil {
			conn.Close()
		}
	}
	if err2 != nil {
		return nil, fmt.Errorf("%w: connect to systemd at %s: %w; on the system bus: %w", ErrManager, privateSocket, err, err2)
	}
	return conn, nil
}
