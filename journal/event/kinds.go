package event

import "time"

// Kind names what a record says. The string is what is stored: append-only,
// never renamed, never reused. Add new kinds at the end of the block.
type Kind string

// The whole vocabulary. Each kind has exactly one payload struct below.
const (
	DeclarationReceived  Kind = "declaration.received"
	DeclarationRefused   Kind = "declaration.refused"
	ReconcileStarted     Kind = "reconcile.started"
	ReconcileCompleted   Kind = "reconcile.completed"
	ResourceApplied      Kind = "resource.applied"
	DriftObserved        Kind = "drift.observed"
	HostStarted          Kind = "host.started"
	VersionDelivered     Kind = "version.delivered"
	VersionConfirmed     Kind = "version.confirmed"
	VersionStoodAside    Kind = "version.stood-aside"
	VersionRetired       Kind = "version.retired"
	VersionRolledBack    Kind = "version.rolled-back"
	LinkUp               Kind = "link.up"
	LinkDown             Kind = "link.down"
	JournalCompacted     Kind = "journal.compacted"
	LinkRefused          Kind = "link.refused"
	VersionHalted        Kind = "version.halted"
	LinkPlaintext        Kind = "link.plaintext"
	LinkRenewed          Kind = "link.renewed"
	LinkDenied           Kind = "link.denied"
	DirTightened         Kind = "dir.tightened"
	JournalScrubbed      Kind = "journal.scrubbed"
	HostFacts            Kind = "host.facts"
	PlanAnswered         Kind = "plan.answered"
	DeclarationReapplied Kind = "declaration.reapplied"
	RefreshOwed          Kind = "refresh.owed"
	RefreshDone          Kind = "refresh.done"
	RefreshFailed        Kind = "refresh.failed"
	ResourceSkipped      Kind = "resource.skipped"
)

// payloads maps each known kind to a constructor of its payload.
var payloads = map[Kind]func() any{
	DeclarationReceived:  func() any { return new(DeclarationReceivedPayload) },
	DeclarationRefused:   func() any { return new(DeclarationRefusedPayload) },
	ReconcileStarted:     func() any { return new(ReconcileStartedPayload) },
	ReconcileCompleted:   func() any { return new(ReconcileCompletedPayload) },
	ResourceApplied:      func() any { return new(ResourceAppliedPayload) },
	DriftObserved:        func() any { return new(DriftObservedPayload) },
	HostStarted:          func() any { return new(HostStartedPayload) },
	VersionDelivered:     func() any { return new(VersionPayload) },
	VersionConfirmed:     func() any { return new(VersionPayload) },
	VersionStoodAside:    func() any { return new(VersionStoodAsidePayload) },
	VersionRetired:       func() any { return new(VersionPayload) },
	VersionRolledBack:    func() any { return new(VersionRolledBackPayload) },
	LinkUp:               func() any { return new(LinkPayload) },
	LinkDown:             func() any { return new(LinkPayload) },
	JournalCompacted:     func() any { return new(JournalCompactedPayload) },
	LinkRefused:          func() any { return new(LinkRefusedPayload) },
	VersionHalted:        func() any { return new(VersionHaltedPayload) },
	LinkPlaintext:        func() any { return new(LinkPlaintextPayload) },
	LinkRenewed:          func() any { return new(LinkRenewedPayload) },
	LinkDenied:           func() any { return new(LinkPayload) },
	DirTightened:         func() any { return new(DirTightenedPayload) },
	JournalScrubbed:      func() any { return new(JournalScrubbedPayload) },
	HostFacts:            func() any { return new(HostFactsPayload) },
	PlanAnswered:         func() any { return new(PlanAnsweredPayload) },
	DeclarationReapplied: func() any { return new(DeclarationReappliedPayload) },
	RefreshOwed:          func() any { return new(RefreshOwedPayload) },
	RefreshDone:          func() any { return new(RefreshDonePayload) },
	RefreshFailed:        func() any { return new(RefreshFailedPayload) },
	ResourceSkipped:      func() any { return new(ResourceSkippedPayload) },
}

// Known reports whether this binary knows kind k.
func Known(k Kind) bool { _, ok := payloads[k]; return ok }

// Kinds lists every kind this binary knows, in declaration order of the
// vocabulary above.
func Kinds() []Kind {
	return []Kind{
		DeclarationReceived, DeclarationRefused, ReconcileStarted, ReconcileCompleted,
		ResourceApplied, DriftObserved, HostStarted, VersionDelivered, VersionConfirmed,
		VersionStoodAside, VersionRetired, VersionRolledBack, LinkUp, LinkDown, JournalCompacted,
		LinkRefused, VersionHalted, LinkPlaintext, LinkRenewed, LinkDenied, DirTightened,
		JournalScrubbed, HostFacts, PlanAnswered, DeclarationReapplied, RefreshOwed, RefreshDone,
		RefreshFailed, ResourceSkipped,
	}
}

// DeclaredResource is one resource of a declaration as the journal remembers
// it: its identity and the digest of its spec. The spec itself travels in the
// declaration document.
type DeclaredResource struct {
	ID         string `json:"id"`
	SpecDigest string `json:"spec_digest"`
}

// DeclarationReceivedPayload records a declaration the host accepted as its
// desired state. Its document, the declaration as received, is kept so the
// host can reconcile from its journal alone while offline: in Document, in
// records written before documents were stored apart; since then in the
// journal's documents, named by DocumentSHA256 ("sha256:" and the hex
// digest of the exact bytes) with DocumentBytes its length, so that the
// record stays small whatever the document's size and a document is stored
// once. A record sent upward carries both (see linkproto.EventBody): the
// control plane has no journal to look the document up in.
type DeclarationReceivedPayload struct {
	Revision       uint64             `json:"revision"`
	Digest         string             `json:"digest"`
	Source         string             `json:"source"` // "file:PATH" or "push"
	Resources      []DeclaredResource `json:"resources"`
	Document       []byte             `json:"document,omitempty"`
	DocumentSHA256 string             `json:"document_sha256,omitempty"`
	DocumentBytes  int                `json:"document_bytes,omitempty"`
	// ResourcesSHA256, when set, names the JSON of Resources, stored apart
	// like the document: the record as stored has null resources, and the
	// journal's readers see them put back (journal.Options.Expand).
	ResourcesSHA256 string `json:"resources_sha256,omitempty"`
	// Operator names who made the declaration; Signer and Signature are
	// the mesh's signature over it as it arrived (the document holds the
	// signed bytes), so `mesh-host journal --verify` can prove, at any
	// later time, that the mesh sent it. A declaration applied from a file
	// on the machine has none of them.
	Operator  string `json:"operator,omitempty"`
	Signer    string `json:"signer,omitempty"`
	Signature string `json:"signature,omitempty"`
	// Local marks a local override: a declaration applied on an enrolled
	// machine with `apply --local`, stepping outside the mesh; User
	// names who applied it (bounded and checked before it is journaled).
	Local bool   `json:"local,omitempty"`
	User  string `json:"user,omitempty"`
	// MeshRevision and MeshSignature name the mesh's declaration a local
	// override set aside (none when the mesh had declared nothing): the
	// one a reclaim is ordered against, and which is no reclaim itself.
	MeshRevision  uint64 `json:"mesh_revision,omitempty"`
	MeshSignature string `json:"mesh_signature,omitempty"`
	// Reclaim marks a declaration from the mesh signed as a reclaim
	// (`meshctl declare --reclaim`); with ReclaimedRevision set, it took
	// the machine back from the local override of that revision.
	Reclaim           bool   `json:"reclaim,omitempty"`
	ReclaimedRevision uint64 `json:"reclaimed_revision,omitempty"`
}

// DeclarationReappliedPayload records a declaration accepted again that
// is the one already desired: the same revision and the same digest. It
// carries no document and no resources: the record's Cause is the
// declaration.received that holds them, so the journal grows by a small
// record, not by the document, each time an unchanged declaration is
// applied, and `journal --why` follows the cause to the document. It
// changes nothing in the projection.
type DeclarationReappliedPayload struct {
	Revision uint64 `json:"revision"`
	Digest   string `json:"digest"`
	Source   string `json:"source"`
}

// DeclarationRefusedPayload records a declaration the host would not take,
// and why. Nothing of a refused declaration is applied.
type DeclarationRefusedPayload struct {
	Revision uint64 `json:"revision,omitempty"`
	Digest   string `json:"digest,omitempty"`
	Source   string `json:"source"`
	Reason   string `json:"reason"`
}

// Trigger says what started a reconcile.
type Trigger string

// The four triggers, and manual for a person running a command.
const (
	TriggerPushed    Trigger = "pushed"
	TriggerStart     Trigger = "start"
	TriggerReconnect Trigger = "reconnect"
	TriggerTimer     Trigger = "timer"
	TriggerManual    Trigger = "manual"
	// TriggerWatch: a service manager told the host that a unit it holds
	// stopped, and the host looked at once rather than at its drift timer.
	TriggerWatch Trigger = "watch"
)

// Action is what a reconcile does, or did, to one resource.
type Action string

// Actions, as planned and as outcomes. Failed is an outcome only.
const (
	ActionCreate    Action = "created"
	ActionUpdate    Action = "updated"
	ActionDelete    Action = "deleted"
	ActionUnchanged Action = "unchanged"
	ActionFailed    Action = "failed"
	// ActionReleased: no longer declared, and left in place rather than
	// removed, because something else retires it (a host version
	// directory is the running host's or its predecessor's until the
	// upgrade logic retires it: version.retired), or because what is
	// there is no longer the host's alone to remove (a directory holding
	// entries it does not own: drivers.ErrLeftInPlace). The host no
	// longer owns it.
	ActionReleased Action = "released"
)

// Step is one planned change: the intent journaled before it is made.
type Step struct {
	Resource string `json:"resource"`
	Action   Action `json:"action"`
}

// ReconcileStartedPayload is the intent of a reconcile. A started record with
// no completed record after it means the host stopped mid-apply, and the next
// start finishes the job.
type ReconcileStartedPayload struct {
	Trigger  Trigger `json:"trigger"`
	Revision uint64  `json:"revision"`
	Plan     []Step  `json:"plan,omitempty"`
	// PlanSHA256, when set, names the JSON of Plan stored apart in the
	// journal's documents, as a declaration.received's resources are: a
	// plan lists every resource created, updated or removed, which for
	// hundreds of thousands of resources is more than a record may hold.
	// The record as stored has no plan; the journal's readers see it put
	// back (journal.Options.Expand).
	PlanSHA256 string `json:"plan_sha256,omitempty"`
}

// Result sums up a reconcile.
type Result string

// Results of a reconcile.
const (
	ResultConverged Result = "converged"
	ResultFailed    Result = "failed"
)

// ReconcileCompletedPayload closes a reconcile. A timer reconcile that found
// nothing to do appends only this record (Quiet, with Started set) and no
// started record or per-resource outcomes: that keeps a quiet machine's
// journal small.
type ReconcileCompletedPayload struct {
	Trigger   Trigger   `json:"trigger"`
	Revision  uint64    `json:"revision"`
	Result    Result    `json:"result"`
	Started   time.Time `json:"started"`
	Changed   int       `json:"changed,omitempty"`
	Unchanged int       `json:"unchanged,omitempty"`
	Failed    int       `json:"failed,omitempty"`
	Quiet     bool      `json:"quiet,omitempty"`
	// Skipped counts the resources skipped because one they depend on
	// failed; Refreshed the refreshes delivered, RefreshFailed those
	// that failed and stay owed.
	Skipped       int `json:"skipped,omitempty"`
	Refreshed     int `json:"refreshed,omitempty"`
	RefreshFailed int `json:"refresh_failed,omitempty"`
	// Error says why a reconcile ended before its outcomes were all
	// journaled (Result is then failed); empty when it ran to the end.
	Error string `json:"error,omitempty"`
}

// ResourceAppliedPayload is the outcome for one resource. Record.Resource
// names it.
type ResourceAppliedPayload struct {
	Action     Action `json:"action"`
	SpecDigest string `json:"spec_digest,omitempty"`
	Error      string `json:"error,omitempty"`
	// Note is the driver's word on the outcome: why a resource was
	// released rather than deleted (what was left in place), what an
	// exec's run printed (bounded), what a unit's apply could not do
	// where no service manager runs.
	Note string `json:"note,omitempty"`
	// IDs are the ids the resource holds on the machine after the apply
	// (a user's uid, a group's gid): the projection remembers every id
	// a name has held, and the host never allocates it to another.
	IDs []HeldID `json:"ids,omitempty"`
}

// HeldID is an id a user or group holds on the machine.
type HeldID struct {
	// Kind is "uid" or "gid"; Name the user's or group's name.
	Kind string `json:"kind"`
	ID   int    `json:"id"`
	Name string `json:"name"`
	// Made is set when this apply created the user or group.
	Made bool `json:"made,omitempty"`
}

// DriftObservedPayload says a resource no longer matches what was applied.
type DriftObservedPayload struct {
	Differs []string `json:"differs"` // e.g. "content", "mode", "absent"
	Wanted  string   `json:"wanted"`  // digest of the state the host applied
	Seen    string   `json:"seen"`    // digest of the state found
}

// HostStartedPayload records a host process starting. Version is the
// running version: the version directory's name when the process runs from
// one (a managed version), else the link-time version. Build is the
// link-time version beside a directory's name; empty when Version is it.
type HostStartedPayload struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	Build   string `json:"build,omitempty"`
}

// VersionPayload names one host version (its artifact digest) for delivered,
// confirmed and retired.
type VersionPayload struct {
	Version string `json:"version"`
}

// VersionStoodAsidePayload records the running host exiting for a successor.
type VersionStoodAsidePayload struct {
	Running string `json:"running"`
	Newer   string `json:"newer,omitempty"`
	Reason  string `json:"reason"`
}

// VersionRolledBackPayload records what the launcher decided.
type VersionRolledBackPayload struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// VersionHaltedPayload records that the launcher halted while no host ran:
// Failed failed its starts to the limit (after Other was rolled back from,
// when Other differs), so the machine, not the binary, is the problem.
// Journaled by the next host that starts, once the machine is fixed.
type VersionHaltedPayload struct {
	Failed   string `json:"failed"`
	Other    string `json:"other,omitempty"`
	ExitCode int    `json:"exit_code"`
	Reason   string `json:"reason"`
}

// LinkRefusedPayload records a message from the link that the host refused:
// malformed, oversized, of an unknown protocol version or for another node.
// A declaration that decodes but is refused is a declaration.refused
// instead. Suppressed counts refusals not journaled one by one since the
// previous link.refused, so a flood cannot fill the journal.
type LinkRefusedPayload struct {
	Subject    string `json:"subject"`
	Reason     string `json:"reason"`
	Bytes      int    `json:"bytes"`
	Suppressed int    `json:"suppressed,omitempty"`
}

// LinkPayload records the link to the control plane coming up or going
// down, or the broker denying the node's credentials (link.denied: revoked
// or expired, journaled once while the link is down; the host keeps
// trying, and keeps running from its journal).
type LinkPayload struct {
	Broker string `json:"broker,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// DirTightenedPayload records a directory of the host's own (its state
// directory, its socket's) found open to others at start and made 0700:
// Was is the mode it had, in octal. Someone loosened it, or it was made
// by hand; either is worth knowing.
type DirTightenedPayload struct {
	Path string `json:"path"`
	Was  string `json:"was"`
}

// LinkPlaintextPayload records a host starting its link without TLS,
// because its configuration explicitly allows it: nothing authenticates
// the broker at URLs, so whatever answers there can push declarations.
// Journaled at every start, so the journal shows every run it was so.
type LinkPlaintextPayload struct {
	URLs   []string `json:"urls"`
	Reason string   `json:"reason"`
}

// LinkRenewedPayload records the node's credentials signed again by the
// control plane, for the same key, before they expired: the public key and
// the new expiry. Never a secret.
type LinkRenewedPayload struct {
	Key     string    `json:"key"`
	Expires time.Time `json:"expires"`
}

// JournalScrubbedPayload records a scrub that found no damage: the service
// re-read every record through Head (Records of them, from First; those
// before were compacted away) and found every checksum right, in the
// records and in the stored projection (Owned resources in it). Differences
// counts the ways the stored projection disagrees with a replay of the
// records: 0 unless a version that folds differently stored it. A scrub
// that finds damage records nothing: the service stops instead, and
// nothing is appended to a damaged journal.
type JournalScrubbedPayload struct {
	Head        uint64 `json:"head"`
	First       uint64 `json:"first"`
	Records     uint64 `json:"records"`
	Owned       int    `json:"owned"`
	Differences int    `json:"differences"`
}

// HostFactsPayload records what the machine is, when that changed since the
// last such record (and at the first start): so the journal says when a
// machine changed under the mesh (a kernel upgraded, memory added, a
// reboot, an address moved).
type HostFactsPayload struct {
	Hostname  string   `json:"hostname,omitempty"`
	OSID      string   `json:"os_id,omitempty"`      // os-release ID, under the root
	OSVersion string   `json:"os_version,omitempty"` // os-release VERSION_ID
	Arch      string   `json:"arch,omitempty"`
	Kernel    string   `json:"kernel,omitempty"`
	Cores     int      `json:"cores,omitempty"`
	MemoryMB  uint64   `json:"memory_mb,omitempty"`
	Addresses []string `json:"addresses,omitempty"` // global unicast, sorted
	BootID    string   `json:"boot_id,omitempty"`
	Version   string   `json:"version,omitempty"` // the host's build label
}

// PlanAnsweredPayload records a plan the control plane asked for (`meshctl
// plan`) and this host answered: computed against the machine as apply
// would, and nothing changed. It names the document by its digest and
// counts the planned actions; the document itself, and with it any
// secret's sealed value, is not kept. Refused says why no plan was made
// for a request the mesh signed (an older revision, the host's own
// installation named, a secret that does not open); the counts are then 0.
type PlanAnsweredPayload struct {
	Revision  uint64 `json:"revision"`
	Digest    string `json:"digest,omitempty"`
	Operator  string `json:"operator,omitempty"`
	Create    int    `json:"create,omitempty"`
	Update    int    `json:"update,omitempty"`
	Delete    int    `json:"delete,omitempty"`
	Released  int    `json:"released,omitempty"`
	Unchanged int    `json:"unchanged,omitempty"`
	Failed    int    `json:"failed,omitempty"`
	Refused   string `json:"refused,omitempty"`
}

// RefreshOwedPayload records that a resource (Record.Resource: a unit or
// an exec) owes a refresh because Source changed: journaled in the
// transaction that journals Source's outcome, so that no crash, failed
// reconcile or self-upgrade between the change and the refresh loses
// it. The owed refresh stays in the projection until a refresh.done, or
// until a declaration no longer declares the resource.
type RefreshOwedPayload struct {
	// Source is the ID of the resource whose change owes the refresh,
	// and Change what happened to it: created or updated. Repair is set
	// when the change repaired drift.
	Source string `json:"source"`
	Change Action `json:"change"`
	Repair bool   `json:"repair,omitempty"`
	// Refresh is what the refresh will do: restart, reload,
	// reload-or-restart (a unit) or run (an exec).
	Refresh string `json:"refresh"`
	// Interrupted, when set, is the reconcile.started of a reconcile
	// that stopped (a crash, a kill) after it planned to change Source
	// and before it journaled the outcome: whether Source changed is not
	// known, so the refresh is owed.
	Interrupted uint64 `json:"interrupted,omitempty"`
}

// RefreshDonePayload records an owed refresh delivered: Record.Resource
// was refreshed (Did: restarted, reloaded, ran) or needed none (Did
// empty, Note says why: it does not run, so a refresh does not start it;
// it started after the change). It clears every refresh the resource
// owed when its delivery began; Sources names those changes.
type RefreshDonePayload struct {
	Did     string   `json:"did,omitempty"`
	Note    string   `json:"note,omitempty"`
	Sources []string `json:"sources,omitempty"`
}

// RefreshFailedPayload records a refresh that was tried and failed:
// the refresh stays owed, and the next reconcile tries again. Error
// carries what the resource said (a unit's last journal lines), bounded
// and redacted.
type RefreshFailedPayload struct {
	Error   string   `json:"error"`
	Sources []string `json:"sources,omitempty"`
}

// ResourceSkippedPayload records a declared resource that a reconcile
// did not apply because a resource it depends on (a requirement, or a
// resource that notifies it) failed or was itself skipped: Requirement
// names it. Nothing was changed; the next reconcile tries again.
type ResourceSkippedPayload struct {
	Requirement string `json:"requirement"`
	Reason      string `json:"reason,omitempty"`
}

// JournalCompactedPayload records a compaction: records up to Through were
// dropped and the projection as of Through kept as a snapshot.
type JournalCompactedPayload struct {
	Through uint64 `json:"through"`
	Dropped uint64 `json:"dropped"`
}
