// Package linkproto is the wire protocol between a host (mesh-host) and the
// control plane (meshctl): every subject, every message type and the
// protocol version. Both ends import it; nothing else defines a subject.
//
// The shape of the link, in one paragraph: a node speaks core NATS only, on
// subjects scoped to itself: it subscribes under mesh.MESH.down.NODE and
// publishes under mesh.MESH.up.NODE, and its credentials allow nothing else.
// The control plane keeps the durable state in JetStream (desired state per
// node in a KV bucket, every node's journal in the events stream, the last
// heartbeat of each node in the heartbeats stream). A node never calls the
// JetStream API: its events reach the stream because the stream captures
// its up.NODE.events.SEQ subjects; the stream sends no acknowledgements
// (see syncToken). docs/link.md shows the protocol with the stock nats
// CLI.
package linkproto

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ProtocolVersion is the version of the messages below. A receiver refuses a
// message of a newer version than its own, and of version 0 (a message that
// does not say). Unknown fields are ignored, so adding an optional field does
// not need a new version; changing what a field means does.
//
// History:
//   - 1 (2026-11-29): declaration push and ack, hello and welcome, heartbeat,
//     journal events (no stream acknowledgements: sync and synced instead).
//   - 2 (2026-12-02): declarations, welcomes and synceds are signed with the
//     mesh's declaration key, and a declaration names its operator; hellos
//     and syncs carry a nonce the answer signs. A node refuses what is not
//     signed, so a version-1 control plane cannot drive a version-2 node.
//     Journal records travel on mesh.MESH.up.NODE.events.SEQ, one subject
//     per record, with no message id: the stream's identity of a record is
//     its subject, which only its node may publish on.
//   - 3 (2026-12-04): enrolment tokens are signed, expiring, single-use
//     bootstraps (meshtoken2.) that carry no credentials: the host makes
//     its key, presents the token with its public half (Enrol), and is
//     answered with its credentials (Credential); a node renews them
//     before they expire (Renew).
//
// Added without a new version, as nothing said before changes meaning
// (oldest first):
//   - Planning: mesh.MESH.down.NODE.plan carries a PlanRequest (a
//     declaration signed for planning only), answered with a PlanAnswer:
//     the plan the node computes against its machine, changing nothing. A
//     node that does not know the subject does not answer, and counts as
//     offline to the asker.
//   - A plan step's digest and diff: what it would write, so that plans
//     are grouped by content. A control plane that does not know them
//     groups by steps alone; a node that does not send them is a plan of
//     its own.
//   - A heartbeat's stopping: the host is stopping on purpose (its last
//     heartbeat before its link closes). A control plane that does not
//     know it sees the node silent later, as before.
//   - Local overrides and reclaims: a Declaration may be a reclaim
//     (reclaim: true, inside its signature); a Hello says local when the
//     node holds a local override, and the Welcome then carries a stored
//     reclaim whatever its revision; a Heartbeat carries the override
//     (local). A node that does not know reclaims refuses one as a bad
//     signature; a control plane that does not know local shows such a
//     node by its revisions.
const ProtocolVersion = 3

// Subjects. MESH and NODE are names (see ValidName); the functions below
// fill them in. Nothing else in the mesh builds a subject.
const (
	// subjectRoot starts every subject of the mesh.
	subjectRoot = "mesh"
	// downToken and upToken say the direction: down is control → node
	// (the node may only subscribe there), up is node → control (the node
	// may only publish there).
	downToken = "down"
	upToken   = "up"

	// declarationToken: mesh.MESH.down.NODE.declaration carries a
	// Declaration push as a request; the node replies with an Ack.
	declarationToken = "declaration"
	// planToken: mesh.MESH.down.NODE.plan carries a PlanRequest as a
	// request; the node replies with a PlanAnswer. Its own subject, so
	// that a plan is never mistaken for a push by anything that listens.
	planToken = "plan"
	// inboxToken: mesh.MESH.down.NODE.inbox is the node's inbox prefix:
	// the replies to its requests (Welcome, JetStream acknowledgements).
	inboxToken = "inbox"
	// helloToken: mesh.MESH.up.NODE.hello is a Hello request, answered by
	// any control service with a Welcome.
	helloToken = "hello"
	// heartbeatToken: mesh.MESH.up.NODE.heartbeat carries Heartbeats; the
	// heartbeats stream keeps the last one of each node.
	heartbeatToken = "heartbeat"
	// stateToken: mesh.MESH.up.NODE.state carries the node's Report, its
	// projection, when it changes; the states stream keeps the last one of
	// each node.
	stateToken = "state"
	// eventsToken: mesh.MESH.up.NODE.events.SEQ carries journal record
	// SEQ, one per message, captured by the events stream. The stream
	// keeps one message per subject and refuses the rest, so a record is
	// stored once however often it is sent. The record's identity is its
	// subject, which the broker lets only NODE publish on: a header
	// (JetStream's Nats-Msg-Id) would be whatever the publisher chose, and
	// one node could name another's records with it and have the stream
	// drop them as duplicates. The node publishes without a reply subject,
	// and the stream sends no acknowledgements (see syncToken).
	eventsToken = "events"
	// syncToken: mesh.MESH.up.NODE.sync is a Sync request, answered by
	// any control service with a Synced: how much of the node's journal
	// the events stream holds. It stands in for JetStream's own
	// acknowledgements, which the streams do not send: the server sends
	// an acknowledgement to whatever reply subject the publisher gave,
	// with the account's rights, not the node's, so a node could aim it
	// at another node's subjects or the KV bucket.
	syncToken = "sync"
	// renewToken: mesh.MESH.up.NODE.renew is a Renew request, answered by
	// any control service with a Credential, into the node's inbox only.
	renewToken = "renew"

	// enrolToken: mesh.MESH.enrol.ID is where the bootstrap user of token
	// ID presents it (an Enrol request); the answer, a Credential, comes
	// to mesh.MESH.enrolled.ID.>, the only subjects that user may
	// subscribe to. Neither is a node's: a host is not a node until its
	// token is redeemed.
	enrolToken    = "enrol"
	enrolledToken = "enrolled"
)

// JetStream names, used by the control plane only: nodes never see them.
const (
	// EventsStream holds every node's journal, exactly once per record.
	EventsStream = "MESH_EVENTS"
	// HeartbeatsStream keeps the latest heartbeat of every node.
	HeartbeatsStream = "MESH_HEARTBEATS"
	// StatesStream keeps the latest Report of every node.
	StatesStream = "MESH_STATES"
	// DesiredBucket is the KV bucket of desired state: key MESH.NODE, value
	// the declaration's JSON document.
	DesiredBucket = "MESH_DESIRED"
	// SealKeysBucket is the KV bucket of nodes' public sealing keys, as
	// their hellos tell them: key MESH.NODE.
	SealKeysBucket = "MESH_SEAL_KEYS"
	// TokensBucket records each redeemed enrolment token: key MESH.ID,
	// created once, so a token is redeemed once however many control
	// services answer; and, key MESH.refused.NODE, when a node was last
	// revoked or removed: its tokens made until then are refused.
	TokensBucket = "MESH_TOKENS"
	// NodesBucket holds each node's credential: key MESH.NODE, value a
	// NodeCredential record (package store) with its public key, expiry
	// and whether it is revoked.
	NodesBucket = "MESH_NODES"
	// LabelsBucket holds each node's labels: key MESH.NODE, value a
	// LabelRecord (package store), its history the changes, who and when.
	LabelsBucket = "MESH_LABELS"
	// ProfilesBucket holds the fleet's profiles: key MESH.NAME, value a
	// ProfileRecord (package store), its history every change, who and
	// when; a removed profile is a record saying so, so the history keeps
	// who removed it.
	ProfilesBucket = "MESH_PROFILES"
	// RolloutsBucket holds each rollout's state: key MESH.ID, value a
	// Rollout (package rollout); and MESH.active.rollout, created
	// atomically, naming the one rollout that may be active. Whichever
	// control service holds a rollout's lease drives it; the state
	// survives every one of them.
	RolloutsBucket = "MESH_ROLLOUTS"
	// RolloutEventsStream keeps every step of every rollout, on
	// mesh.MESH.rollout.ID (control plane only).
	RolloutEventsStream = "MESH_ROLLOUT_EVENTS"
	// BadReleasesBucket holds each host release a node rolled back in a
	// rollout: key MESH.HEX (the release's digest), value a BadRelease
	// (package rollout). No rollout delivers a release listed here.
	BadReleasesBucket = "MESH_BAD_RELEASES"
	// PresenceBucket holds what the broker last said of each node's
	// connection: key MESH.NODE, value a Presence (package store),
	// written by the control services from the system account's connect
	// and disconnect events.
	PresenceBucket = "MESH_PRESENCE"
	// ControlQueue is the queue group control services answer hellos in,
	// so several may serve one mesh and each hello is answered once.
	ControlQueue = "meshctl"
)

// Errors returned by this package.
var (
	// ErrInvalidName is returned for a mesh or node name that cannot be a
	// subject token.
	ErrInvalidName = errors.New("invalid name")
	// ErrNotEventSubject is returned for a subject that is not one
	// journal record's events subject (EventSubject).
	ErrNotEventSubject = errors.New("not a journal record's events subject")
)

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidName reports whether s can name a mesh or a node: lower-case letters,
// digits, '-' and '_', starting with a letter or digit, at most 63 bytes.
// Such a name is one subject token with no wildcard, so a node's
// permissions cannot be widened by its name.
func ValidName(s string) error {
	if !namePattern.MatchString(s) {
		return fmt.Errorf("%w %q: use lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters", ErrInvalidName, s)
	}
	return nil
}

func subject(mesh, dir, node, token string) string {
	return strings.Join([]string{subjectRoot, mesh, dir, node, token}, ".")
}

// DeclarationSubject is where the control plane pushes node's declaration.
func DeclarationSubject(mesh, node string) string {
	return subject(mesh, downToken, node, declarationToken)
}

// PlanSubject is where the control plane asks node for a plan.
func PlanSubject(mesh, node string) string {
	return subject(mesh, downToken, node, planToken)
}

// InboxPrefix is node's inbox: the node subscribes to InboxPrefix+".>".
func InboxPrefix(mesh, node string) string {
	return subject(mesh, downToken, node, inboxToken)
}

// HelloSubject is where node says it is up and asks for its declaration.
func HelloSubject(mesh, node string) string { return subject(mesh, upToken, node, helloToken) }

// StateSubject is where node sends its Report.
func StateSubject(mesh, node string) string {
	return subject(mesh, upToken, node, stateToken)
}

// HeartbeatSubject is where node reports.
func HeartbeatSubject(mesh, node string) string {
	return subject(mesh, upToken, node, heartbeatToken)
}

// EventSubject is where node publishes its journal record seq: the
// subject, not any header, says which record a message is.
func EventSubject(mesh, node string, seq uint64) string {
	return subject(mesh, upToken, node, eventsToken) + "." + strconv.FormatUint(seq, 10)
}

// NodeEvents matches every record subject of node: how the control plane
// reads one node's journal out of the events stream.
func NodeEvents(mesh, node string) string {
	return subject(mesh, upToken, node, eventsToken) + ".*"
}

// ParseEventSubject returns the mesh, node and journal sequence of a
// record's events subject. It refuses anything EventSubject would not
// have built (a sequence with a sign or a leading zero, sequence 0, extra
// tokens), so one record has exactly one subject.
func ParseEventSubject(subj string) (mesh, node string, seq uint64, err error) {
	parts := strings.Split(subj, ".")
	if len(parts) != 6 || parts[0] != subjectRoot || parts[2] != upToken || parts[4] != eventsToken {
		return "", "", 0, fmt.Errorf("%w: %q", ErrNotEventSubject, subj)
	}
	if ValidName(parts[1]) != nil || ValidName(parts[3]) != nil {
		return "", "", 0, fmt.Errorf("%w: %q names no valid mesh and node", ErrNotEventSubject, subj)
	}
	seq, err = strconv.ParseUint(parts[5], 10, 64)
	if err != nil || seq == 0 || parts[5] != strconv.FormatUint(seq, 10) {
		return "", "", 0, fmt.Errorf("%w: %q: the last token is not a journal sequence", ErrNotEventSubject, subj)
	}
	return parts[1], parts[3], seq, nil
}

// SyncSubject is where node asks how much of its journal the events stream
// holds.
func SyncSubject(mesh, node string) string { return subject(mesh, upToken, node, syncToken) }

// RenewSubject is where node asks for its credentials signed again.
func RenewSubject(mesh, node string) string { return subject(mesh, upToken, node, renewToken) }

// EnrolSubject is where the bootstrap user of token id presents it.
func EnrolSubject(mesh, id string) string {
	return strings.Join([]string{subjectRoot, mesh, enrolToken, id}, ".")
}

// EnrolledPrefix is the inbox prefix of the bootstrap user of token id: it
// subscribes to EnrolledPrefix+".>".
func EnrolledPrefix(mesh, id string) string {
	return strings.Join([]string{subjectRoot, mesh, enrolledToken, id}, ".")
}

// AllEnrols matches every token's EnrolSubject in mesh.
func AllEnrols(mesh string) string { return EnrolSubject(mesh, "*") }

// NodeSubscribe is everything node may subscribe to.
func NodeSubscribe(mesh, node string) string { return subject(mesh, downToken, node, ">") }

// NodePublish is everything node may publish to.
func NodePublish(mesh, node string) string { return subject(mesh, upToken, node, ">") }

// AllHellos, AllHeartbeats and AllSyncs match the subject of every node of
// mesh: what the control service listens on.
func AllHellos(mesh string) string     { return subject(mesh, upToken, "*", helloToken) }
func AllHeartbeats(mesh string) string { return subject(mesh, upToken, "*", heartbeatToken) }

// rolloutToken: mesh.MESH.rollout.ID carries the steps of rollout ID, for
// the control plane's rollout events stream. Nodes may neither publish
// nor subscribe there.
const rolloutToken = "rollout"

// RolloutEventSubject is where the steps of rollout id are recorded.
func RolloutEventSubject(mesh, id string) string {
	return subjectRoot + "." + mesh + "." + rolloutToken + "." + id
}

// AnyMeshRollouts is the rollout events stream's subject.
const AnyMeshRollouts = subjectRoot + ".*." + rolloutToken + ".*"

func AllSyncs(mesh string) string  { return subject(mesh, upToken, "*", syncToken) }
func AllRenews(mesh string) string { return subject(mesh, upToken, "*", renewToken) }

// AnyMeshHeartbeats and AnyMeshEvents are the streams' subjects: one stream
// serves every mesh on the broker.
const (
	AnyMeshHeartbeats = subjectRoot + ".*." + upToken + ".*." + heartbeatToken
	AnyMeshStates     = subjectRoot + ".*." + upToken + ".*." + stateToken
	AnyMeshEvents     = subjectRoot + ".*." + upToken + ".*." + eventsToken + ".*"
	// LegacyAnyMeshEvents is what the events stream captured before the
	// sequence moved into the subject: every record of a node on one
	// subject, told apart by headers the node chose. The control plane
	// reads it only to move such records to their own subjects; it can
	// go, with that move, once no stream holds records of nodes before
	// ProtocolVersion 2.
	LegacyAnyMeshEvents = subjectRoot + ".*." + upToken + ".*." + eventsToken
)

// NodeOf returns the mesh and node an up or down subject is about.
func NodeOf(subj string) (mesh, node string, err error) {
	parts := strings.Split(subj, ".")
	if len(parts) < 5 || parts[0] != subjectRoot || (parts[2] != upToken && parts[2] != downToken) {
		return "", "", fmt.Errorf("%q is not a mesh subject", subj)
	}
	if err := ValidName(parts[1]); err != nil {
		return "", "", err
	}
	if err := ValidName(parts[3]); err != nil {
		return "", "", err
	}
	return parts[1], parts[3], nil
}

// DesiredKey is node's key in the DesiredBucket.
func DesiredKey(mesh, node string) string { return mesh + "." + node }
