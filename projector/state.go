package projector

import (
	"maps"
	"slices"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
)

// State is what the journal says about the host, as of record Head.
//
// Every time in a State is in UTC with no monotonic reading, so a State
// survives Encode and Decode unchanged. A nil map or slice and an empty one
// mean the same; Equal and Encode do not tell them apart.
type State struct {
	// Head is the seq of the last record folded; 0 for none.
	Head uint64 `json:"head"`
	// Desired is the latest accepted declaration; nil before the first.
	Desired *Desired `json:"desired,omitempty"`
	// Owned holds, by resource id, every resource the host has applied and
	// not yet deleted.
	Owned map[string]Owned `json:"owned,omitempty"`
	// LastReconcile is the latest completed reconcile.
	LastReconcile *Reconcile `json:"last_reconcile,omitempty"`
	// Running is the host process that started last.
	Running *Running `json:"running,omitempty"`
	// KnownGood is the latest confirmed version.
	KnownGood string `json:"known_good,omitempty"`
	// Versions are the versions present on disk: delivered and not retired,
	// oldest delivery first, each once (a re-delivered version moves to the
	// end).
	Versions []string `json:"versions,omitempty"`
	// Link is the state of the link to the control plane as of the latest
	// link.up or link.down.
	Link Link `json:"link"`
	// Unknown counts records of kinds this binary does not know.
	Unknown uint64 `json:"unknown,omitempty"`
	// Undecodable counts records of known kinds that this binary could not
	// read: the payload does not decode as the kind's struct, or a
	// resource.applied names no valid resource or an action outside the
	// vocabulary.
	Undecodable uint64 `json:"undecodable,omitempty"`
	// Pending is a reconcile that started and has not completed: after a
	// crash, the next start finishes it.
	Pending *Pending `json:"pending,omitempty"`
	// LastGood is the last-known-good declaration: the latest whose
	// reconcile converged. nil before any did. When Desired is newer, the
	// host is behind: it holds LastGood's state, with what failed since.
	LastGood *LastGood `json:"last_good,omitempty"`
	// Failing holds, by resource id, the declared resources the host does
	// not own whose latest apply failed: never applied, so not owned, but
	// what a host that is behind must say failed. An entry leaves when the
	// resource applies, or when a declaration no longer names it.
	Failing map[string]Failure `json:"failing,omitempty"`
	// Facts are the machine's, from the latest host.facts record.
	Facts *event.HostFactsPayload `json:"facts,omitempty"`
	// Bad are the versions the launcher rolled back from, oldest first:
	// it does not start one again until a newer version arrives. A version
	// leaves the list when it is retired, or confirmed after all.
	Bad []string `json:"bad,omitempty"`
	// Refreshes holds, by resource id (a unit, an exec), the refreshes
	// owed to it: from its first refresh.owed until a refresh.done, or
	// until a declaration no longer declares it. A failed reconcile, a
	// crash or a new version in between leaves them owed.
	Refreshes map[string]OwedRefresh `json:"refreshes,omitempty"`
	// Skipped holds, by resource id, the declared resources the latest
	// reconcile to reach them skipped because one they depend on failed.
	// An entry leaves when the resource is applied, or no longer
	// declared.
	Skipped map[string]Skip `json:"skipped,omitempty"`
	// IDs holds every id a user or group has held on the machine since
	// the host applied it, "uid:1001" or "gid:1001" to the name that held
	// it first: never dropped, so that an id is never given to another
	// name, even after the name that held it is gone.
	IDs map[string]string `json:"ids,omitempty"`
	// Made holds the users and groups the host created ("user:shop",
	// "group:shop"), each to the resource whose apply made it (a user
	// makes a group of its name): the host removes only what it made.
	// An entry leaves when that resource is deleted or released.
	Made map[string]string `json:"made,omitempty"`
	// Local is the local override in force: a declaration applied on the
	// machine with `apply --local` while it is enrolled in a mesh. It
	// is set by such a declaration.received and cleared by any other
	// (the mesh's, a reclaim among them); nil while none is in force.
	Local *LocalOverride `json:"local,omitempty"`
}

// LocalOverride is a declaration applied on an enrolled machine by a
// person, stepping outside the mesh: the host refuses the mesh's
// declarations, but a reclaim, while it holds.
type LocalOverride struct {
	// Revision is the local declaration's, Source where it came from
	// ("file:PATH"), User who applied it.
	Revision uint64 `json:"revision"`
	Source   string `json:"source,omitempty"`
	User     string `json:"user,omitempty"`
	// Seq is the seq of the declaration.received that began it (the
	// latest, when one override followed another), At its time.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at,omitzero"`
	// MeshRevision is the revision of the mesh's declaration it set aside
	// (0 when the mesh had declared none), MeshSignature that
	// declaration's signature: a reclaim is ordered against the mesh's
	// own revision, and the one it set aside is no reclaim of it.
	MeshRevision  uint64 `json:"mesh_revision,omitempty"`
	MeshSignature string `json:"mesh_signature,omitempty"`
}

// MaxRefreshSources bounds the changes an owed refresh names; past it,
// More counts the rest. A thousand files notifying one unit owe it one
// refresh, not a thousand lines of state.
const MaxRefreshSources = 16

// OwedRefresh is a refresh owed to a resource, from its refresh.owed
// records.
type OwedRefresh struct {
	// Sources are the changes that owe it, oldest first, one per source
	// resource; More counts those past MaxRefreshSources.
	Sources []RefreshSource `json:"sources"`
	More    int             `json:"more,omitempty"`
	// Refresh is what it will do (restart, reload, run), from the latest
	// refresh.owed.
	Refresh string `json:"refresh,omitempty"`
	// Since is the time of the first refresh.owed, Seq its seq: a
	// refresh is not needed if the resource restarted after Since.
	Since time.Time `json:"since,omitzero"`
	Seq   uint64    `json:"seq"`
	// Error is the latest failed try's (refresh.failed), FailedSeq its
	// seq; empty while none failed.
	Error     string `json:"error,omitempty"`
	FailedSeq uint64 `json:"failed_seq,omitempty"`
}

// RefreshSource is one change that owes a refresh.
type RefreshSource struct {
	Resource string       `json:"resource"`
	Change   event.Action `json:"change"`
	Repair   bool         `json:"repair,omitempty"`
	// Interrupted is the reconcile.started of a reconcile interrupted
	// after it planned the change (see event.RefreshOwedPayload).
	Interrupted uint64 `json:"interrupted,omitempty"`
	Seq         uint64 `json:"seq"`
}

// Skip is a declared resource a reconcile skipped, from its
// resource.skipped.
type Skip struct {
	Requirement string `json:"requirement"`
	Seq         uint64 `json:"seq"`
}

// Failure is a declared resource's failed apply, from its resource.applied.
type Failure struct {
	SpecDigest string `json:"spec_digest,omitempty"`
	Error      string `json:"error,omitempty"`
	Seq        uint64 `json:"seq"`
}

// LastGood is the latest declaration a reconcile converged, from the
// reconcile.completed that did and the declaration.received it was of.
type LastGood struct {
	Revision uint64 `json:"revision"`
	Digest   string `json:"digest,omitempty"`
	// Seq is the seq of its declaration.received record, Converged that of
	// the reconcile.completed record, At that record's time.
	Seq       uint64    `json:"seq"`
	Converged uint64    `json:"converged"`
	At        time.Time `json:"at,omitzero"`
}

// Desired is the declaration the host was last told to converge to, from
// the latest declaration.received. A declaration.refused does not change it.
type Desired struct {
	Revision  uint64                   `json:"revision"`
	Digest    string                   `json:"digest,omitempty"`
	Resources []event.DeclaredResource `json:"resources,omitempty"`
	// Seq is the seq of the declaration.received record.
	Seq uint64 `json:"seq"`
	// Document is the document, from a record that carried it; otherwise
	// DocumentSHA256 and DocumentBytes name it in the journal's documents
	// (see event.DeclarationReceivedPayload). A fold of records sent
	// upward has both.
	Document       []byte `json:"document,omitempty"`
	DocumentSHA256 string `json:"document_sha256,omitempty"`
	DocumentBytes  int    `json:"document_bytes,omitempty"`
	// Source, Operator, Signer and Signature are the record's: where the
	// declaration came from and, from the mesh, who made it and the
	// signature that proves it (a compacted journal keeps them here).
	Source    string `json:"source,omitempty"`
	Operator  string `json:"operator,omitempty"`
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
	// Reclaim is set when the mesh signed it as a reclaim: its signature
	// covers that.
	Reclaim bool `json:"reclaim,omitempty"`
}

// Owned is one resource the host has applied and not deleted.
type Owned struct {
	// SpecDigest is the digest of the spec last applied successfully (its
	// last good spec): a failed apply keeps the previous one.
	SpecDigest string `json:"spec_digest,omitempty"`
	// GoodRevision is the revision whose reconcile applied SpecDigest: the
	// declaration that holds the last good spec. 0 when not known (an
	// outcome outside a reconcile, or journaled before it was kept).
	GoodRevision uint64 `json:"good_revision,omitempty"`
	// LastOutcome is the action of the latest resource.applied for it.
	LastOutcome event.Action `json:"last_outcome"`
	// Seq is the seq of that resource.applied.
	Seq uint64 `json:"seq"`
	// Drifted is set by a drift.observed after the last outcome and cleared
	// by a successful one.
	Drifted bool `json:"drifted,omitempty"`
	// Error is the error of a failed last outcome.
	Error string `json:"error,omitempty"`
}

// Reconcile is a completed reconcile, from its reconcile.completed record.
type Reconcile struct {
	// Seq is the seq of the reconcile.completed record.
	Seq      uint64        `json:"seq"`
	Trigger  event.Trigger `json:"trigger,omitempty"`
	Revision uint64        `json:"revision"`
	Result   event.Result  `json:"result,omitempty"`
	// Started is the payload's start time, Completed the record's time.
	Started   time.Time `json:"started,omitzero"`
	Completed time.Time `json:"completed,omitzero"`
	Changed   int       `json:"changed,omitempty"`
	Unchanged int       `json:"unchanged,omitempty"`
	Failed    int       `json:"failed,omitempty"`
	Quiet     bool      `json:"quiet,omitempty"`
}

// Running is the host process that started last, from its host.started
// record.
type Running struct {
	// Version is the running version (see event.HostStartedPayload);
	// Build the link-time version when that differs.
	Version string `json:"version,omitempty"`
	Build   string `json:"build,omitempty"`
	PID     int    `json:"pid,omitempty"`
	// Since is the host.started record's time, Seq its seq.
	Since time.Time `json:"since,omitzero"`
	Seq   uint64    `json:"seq"`
}

// Link is the link to the control plane, from the latest link.up or
// link.down record; the zero Link is down and never seen up.
type Link struct {
	Up     bool   `json:"up"`
	Broker string `json:"broker,omitempty"`
	// Since is the time of the latest link.up or link.down record.
	Since  time.Time `json:"since,omitzero"`
	Reason string    `json:"reason,omitempty"`
}

// Pending is an open reconcile, from its reconcile.started record.
type Pending struct {
	// Seq is the seq of the reconcile.started record.
	Seq      uint64        `json:"seq"`
	Trigger  event.Trigger `json:"trigger,omitempty"`
	Revision uint64        `json:"revision"`
	Plan     []event.Step  `json:"plan,omitempty"`
}

// Clone returns a deep copy of s: folding either afterwards leaves the other
// unchanged. Fold consumes its State, so a caller that needs the State from
// before a fold as well as after clones it first.
func (s State) Clone() State {
	c := s
	c.Owned = maps.Clone(s.Owned)
	c.Versions = slices.Clone(s.Versions)
	if s.Desired != nil {
		d := *s.Desired
		d.Resources = slices.Clone(d.Resources)
		d.Document = slices.Clone(d.Document)
		c.Desired = &d
	}
	if s.LastReconcile != nil {
		r := *s.LastReconcile
		c.LastReconcile = &r
	}
	if s.Running != nil {
		r := *s.Running
		c.Running = &r
	}
	if s.Pending != nil {
		p := *s.Pending
		p.Plan = slices.Clone(p.Plan)
		c.Pending = &p
	}
	if s.LastGood != nil {
		g := *s.LastGood
		c.LastGood = &g
	}
	c.Bad = slices.Clone(s.Bad)
	c.Failing = maps.Clone(s.Failing)
	c.Skipped = maps.Clone(s.Skipped)
	c.IDs = maps.Clone(s.IDs)
	c.Made = maps.Clone(s.Made)
	if s.Refreshes != nil {
		c.Refreshes = make(map[string]OwedRefresh, len(s.Refreshes))
		for id, o := range s.Refreshes {
			o.Sources = slices.Clone(o.Sources)
			c.Refreshes[id] = o
		}
	}
	if s.Facts != nil {
		f := *s.Facts
		f.Addresses = slices.Clone(f.Addresses)
		c.Facts = &f
	}
	if s.Local != nil {
		l := *s.Local
		c.Local = &l
	}
	return c
}
