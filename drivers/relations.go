package drivers

import (
	"context"
	"time"
)

// Relations are what a resource says of other resources of the same
// declaration, each named by its ID ("file:/etc/shop/env",
// "unit:shop.service"). Every spec embeds them; the drivers never read
// them: the reconciler orders, skips and refreshes by them, and the
// declaration checks at admission that every ID is declared and that
// they make no cycle.
//
// Each relation orders: what a resource requires, is notified by or
// subscribes to is applied before it. A resource one of whose
// relations failed, or was skipped, is skipped.
type Relations struct {
	// Requires are applied before this resource.
	Requires []string `json:"requires,omitempty"`
	// Notify are refreshed when this resource changes: created, updated
	// or repaired. Each must be of a kind that can be refreshed.
	Notify []string `json:"notify,omitempty"`
	// Subscribe are the resources whose change refreshes this one: the
	// same edge as their Notify, written on the other side.
	Subscribe []string `json:"subscribe,omitempty"`
}

// Related returns the relations a spec embeds: every spec's.
func (r *Relations) Related() *Relations { return r }

// Related is a spec that has relations: every kind's spec embeds
// Relations.
type Related interface {
	Related() *Relations
}

// RelationsOf returns spec's relations; nil when it has none.
func RelationsOf(spec Spec) *Relations {
	r, ok := spec.(Related)
	if !ok {
		return nil
	}
	rel := r.Related()
	if rel == nil || len(rel.Requires)+len(rel.Notify)+len(rel.Subscribe) == 0 {
		return nil
	}
	return rel
}

// The ways a unit is refreshed (UnitSpec.Refresh).
const (
	RefreshRestart         = "restart"
	RefreshReload          = "reload"
	RefreshReloadOrRestart = "reload-or-restart"
)

// Refreshed is what a Refresh did.
type Refreshed struct {
	// Did is what was done ("restarted", "reloaded", "ran"), or "" when
	// nothing needed doing; Note then says why (the unit does not run,
	// so a refresh does not start it; it started after the change).
	Did  string
	Note string
}

// Refresher is an optional Driver capability: a resource that is
// refreshed when a resource it listens to changes, a unit restarted or
// reloaded, an exec run.
type Refresher interface {
	// Refresh refreshes the resource of spec, owed since the change
	// that first owed it. A refresh that is not needed any more (a unit
	// that started after since, or does not run) does nothing and says
	// why. The error of a failed refresh says what the resource said
	// (a unit's last journal lines).
	Refresh(ctx context.Context, spec Spec, since time.Time) (Refreshed, error)
}

// Refreshable is an optional Spec capability: what refreshing its
// resource does ("restart", "reload", "run"), as a refresh.owed and a
// plan name it. The declaration says it (UnitSpec.Refresh) or the kind
// means it (an exec runs).
type Refreshable interface {
	HowRefreshed() string
}

// Applied is the result of one Apply of a batch (BatchApplier).
type Applied struct {
	Action Action
	Err    error
}

// BatchApplier is an optional Driver capability: Apply of several
// resources of its kind at once, for a driver whose tool costs something
// per call that a batch pays once: a service manager reloaded once after
// every unit file of a reconcile is written, not once a unit.
type BatchApplier interface {
	// ApplyBatch applies each of specs as Apply would, and returns
	// their results in the same order.
	ApplyBatch(ctx context.Context, specs []Spec) []Applied
}

// Watcher is an optional Driver capability: it tells the host when a
// resource may no longer be as declared, where something can tell it (a
// service manager announcing that a unit stopped), so that the drift is
// repaired at once rather than at the next drift timer. The timer stays:
// nothing tells of most drift.
type Watcher interface {
	// Watch calls changed with the key of a resource of its kind that
	// may have drifted, until ctx ends or the source fails. It returns
	// the reason it stopped.
	Watch(ctx context.Context, changed func(key string)) error
}

// Number is an id a resource holds on the machine: a user's uid, a
// group's gid.
type Number struct {
	// Kind is "uid" or "gid"; Name the user or group that holds it.
	Kind string
	ID   int
	Name string
	// Made is set when the Apply created the user or group: the host may
	// remove it once it is no longer declared, never one it found.
	Made bool
}

// Numbered is an optional Driver capability of a kind whose resources
// hold ids that must never be given to another name (users, groups).
// After each successful Apply the reconciler journals the ids Numbers
// reports; the host's projection remembers every id a name has held, and
// the driver is told them (its options) so that it never allocates one
// to another name, even after the name that held it is gone.
type Numbered interface {
	Numbers(spec Spec) []Number
}
