package unit

import (
	"context"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// CleanJournal is cleanJournal, for the tests of what an error may carry.
var CleanJournal = cleanJournal

// Coalesce is how long Watch gathers units before it tells of them.
const Coalesce = coalesce

// JournalOf is what a failed job's error says of the unit's journal.
func (d *Driver) JournalOf(ctx context.Context, name string) string { return d.journal(ctx, name) }

// WatchLoop is Watch past its connection: it reads signals as the
// manager sends them, was holding each unit's ActiveState.
func WatchLoop(ctx context.Context, signals <-chan *godbus.Signal, was map[string]string, changed func(string)) error {
	return watchLoop(ctx, signals, was, changed)
}

// StateSignal is the signal the manager sends when unit name's
// ActiveState becomes state, its path escaped as the manager escapes it.
func StateSignal(name, state string) *godbus.Signal {
	return &godbus.Signal{
		Path: godbus.ObjectPath(unitPathPrefix + sdbus.PathBusEscape(name)),
		Name: propertiesSignal,
		Body: []any{unitInterface, map[string]godbus.Variant{"ActiveState": godbus.MakeVariant(state), "SubState": godbus.MakeVariant("dead")}, []string{}},
	}
}

// DialPrivate connects to the manager's private socket, primed.
var DialPrivate = dialPrivate
