package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// States of a node, as `meshctl nodes` shows them.
const (
	// StateOK: heard recently, and applied what is stored for it.
	StateOK = "ok"
	// StateSilent: no heartbeat for three of its own intervals.
	StateSilent = "silent"
	// StateNeverHeard: desired state is stored, but it never reported.
	StateNeverHeard = "never heard"
	// StateBehind: heard recently, but has not applied the stored revision.
	StateBehind = "behind"
	// StateUnreadable: its last heartbeat does not decode.
	StateUnreadable = "unreadable"
	// StateRevoked: its key is revoked; it cannot connect.
	StateRevoked = "revoked"
	// StateExpired: its credentials expired without being renewed; it
	// cannot connect until enrolled again.
	StateExpired = "expired"
	// StateFailed: it applied the stored revision, and some of it failed:
	// it holds its last good declaration (Reason says which, and how many
	// failed).
	StateFailed = "failed"
	// StateRolledBack: the host release declared for it failed to start
	// there, and its launcher rolled back to the known-good version.
	StateRolledBack = "rolled back"
	// StateOffline: it said, in its last heartbeat, that it was stopping
	// on purpose (Reason says why and when), and has not connected since.
	// Known as soon as it stops.
	StateOffline = "offline"
	// StateDisconnected: the broker saw its connection close (Reason
	// says when, and the broker's words), and nothing was heard from it
	// since. Known within a second of a close the broker sees (a killed
	// process, a machine that rebooted), and after the broker's pings go
	// unanswered for a cut network; never known where the control plane
	// has no system account (serve --nats without it): those nodes fall
	// silent instead.
	StateDisconnected = "disconnected"
)

// Unreachable says whether a node in state is known not to be connected
// now, or not heard from: silent, offline or disconnected. A push or a
// rollout's wave will not reach it until it is back.
func Unreachable(state string) bool {
	return state == StateSilent || state == StateOffline || state == StateDisconnected
}

// silentAfter is how many of its own heartbeat intervals a node may miss
// before it counts as silent: one late heartbeat is not silence.
const silentAfter = 3

// defaultInterval stands in for a heartbeat's interval when it gives none.
const defaultInterval = time.Minute

// NodeStatus is one node as the control plane sees it.
type NodeStatus struct {
	Node  string `json:"node"`
	State string `json:"state"`
	// Desired is the revision stored for it; 0 for none.
	Desired uint64 `json:"desired"`
	// Heartbeat is its latest; nil if it never reported.
	Heartbeat *linkproto.Heartbeat `json:"heartbeat,omitempty"`
	// Problem says why a heartbeat is unreadable.
	Problem string `json:"problem,omitempty"`
	// Credential is its record of enrolment: key, expiry, revocation;
	// nil for a node enrolled before credentials were recorded.
	Credential *store.NodeCredential `json:"credential,omitempty"`
	// Release is the host version its stored declaration delivers, if any.
	Release string `json:"release,omitempty"`
	// Reason says why it is failed or rolled back.
	Reason string `json:"reason,omitempty"`
	// Labels are its labels (meshctl label).
	Labels labels.Set `json:"labels,omitempty"`
	// Heard is when the broker stored its latest heartbeat (the
	// broker's clock, which Presence is on too); zero if none.
	Heard time.Time `json:"heard,omitzero"`
	// Presence is what the broker last said of its connection; nil when
	// nothing is recorded (the control plane may not see connections).
	Presence *store.Presence `json:"presence,omitempty"`
}

// Nodes returns every node of the mesh that has reported or has desired
// state, sorted by name. Its five sources (the heartbeats, the desired
// state, the credentials, the labels and the presence the broker tells)
// are read at once, each in one pass: a fleet's listing waits for the
// slowest, not for their sum.
func (c *Client) Nodes(ctx context.Context) ([]NodeStatus, error) {
	type beat struct {
		hb      *linkproto.Heartbeat
		heard   time.Time
		problem string
	}
	var (
		beats    = map[string]beat{}
		desired  = map[string]uint64{}
		creds    map[string]store.NodeCredential
		ls       map[string]labels.Set
		presence map[string]store.Presence
		errs     [5]error
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		errs[0] = c.lastHeartbeats(ctx, func(node string, hb *linkproto.Heartbeat, heard time.Time, problem string) {
			beats[node] = beat{hb, heard, problem}
		})
	})
	wg.Go(func() { presence, errs[4] = c.presences(ctx) })
	wg.Go(func() {
		errs[1] = c.eachDesired(ctx, func(node string, revision uint64) { desired[node] = revision })
	})
	wg.Go(func() { creds, errs[2] = c.credentials(ctx) })
	wg.Go(func() { ls, errs[3] = c.Labels(ctx) })
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}

	byName := map[string]*NodeStatus{}
	get := func(node string) *NodeStatus {
		s, ok := byName[node]
		if !ok {
			s = &NodeStatus{Node: node}
			byName[node] = s
		}
		return s
	}
	for node, b := range beats {
		s := get(node)
		s.Heartbeat, s.Heard, s.Problem = b.hb, b.heard, b.problem
	}
	for node, p := range presence {
		if s, ok := byName[node]; ok { // a node the mesh no longer knows is not listed for it
			s.Presence = &p
		}
	}
	for node, revision := range desired {
		st := get(node)
		st.Desired = revision
		if hb := st.Heartbeat; hb != nil && len(hb.Bad) > 0 {
			// Only then is the release worth finding: it may be bad.
			st.Release = c.releaseFor(ctx, node)
		}
	}
	for node, rec := range creds {
		get(node).Credential = &rec
	}
	for node, set := range ls {
		get(node).Labels = set // a node labelled as its token was issued is listed too
	}

	now := c.Now()
	out := make([]NodeStatus, 0, len(byName))
	for _, s := range byName {
		s.judge(now)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// judge sets s's State and Reason from what was read of it.
func (s *NodeStatus) judge(now time.Time) {
	s.State = stateOf(*s, now)
	s.Reason = reasonOf(*s, now)
	if s.State == StateLocal {
		s.Reason = localReason(s.Heartbeat.Local, now)
	}
}

// Node is one node as Nodes shows it, read from its own entries alone
// (its last heartbeat, its presence, its stored revision, its credential,
// its labels) rather than by listing the fleet: what a page about one node
// of 10,000 reads. known is false when the mesh holds none of them.
func (c *Client) Node(ctx context.Context, node string) (s NodeStatus, known bool, err error) {
	if err := linkproto.ValidName(node); err != nil {
		return NodeStatus{}, false, fmt.Errorf("node: %w", err)
	}
	s = NodeStatus{Node: node}
	heartbeats, err := c.store.Stream(ctx, linkproto.HeartbeatsStream)
	if err != nil {
		return NodeStatus{}, false, err
	}
	switch m, err := heartbeats.GetLastMsgForSubject(ctx, linkproto.HeartbeatSubject(c.Mesh, node)); {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return NodeStatus{}, false, fmt.Errorf("the heartbeat of %s: %w", node, err)
	default:
		known, s.Heard = true, m.Time
		if s.Heartbeat, err = decodeHeartbeat(m.Data); err != nil {
			s.Heartbeat, s.Problem = nil, err.Error()
		}
		// As Nodes does: the broker's word on a node it has heard from.
		if ps, err := c.store.Presences(ctx, c.Mesh); err == nil {
			if p, _, err := ps.Get(ctx, node); err == nil && p != nil && p.Node == node {
				s.Presence = p
			}
		} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return NodeStatus{}, false, err
		}
	}
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return NodeStatus{}, false, err
	}
	if revision, ok, err := desired.Revision(ctx, node); err != nil {
		return NodeStatus{}, false, err
	} else if ok {
		known, s.Desired = true, revision
		if hb := s.Heartbeat; hb != nil && len(hb.Bad) > 0 {
			s.Release = c.releaseFor(ctx, node)
		}
	}
	if kv, err := c.store.KV(ctx, linkproto.NodesBucket); err == nil {
		switch e, err := kv.Get(ctx, store.Key(c.Mesh, node)); {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return NodeStatus{}, false, fmt.Errorf("the credential of %s: %w", node, err)
		default:
			rec, err := store.DecodeCredential(e)
			if err != nil {
				return NodeStatus{}, false, err
			}
			known, s.Credential = true, &rec
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return NodeStatus{}, false, fmt.Errorf("the nodes bucket: %w", err)
	}
	if ls, err := c.store.Labels(ctx, c.Mesh); err == nil {
		rec, revision, err := ls.Get(ctx, node)
		if err != nil {
			return NodeStatus{}, false, err
		}
		if revision > 0 {
			known, s.Labels = true, rec.Labels
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return NodeStatus{}, false, err
	}
	if !known {
		return NodeStatus{}, false, nil
	}
	s.judge(c.Now())
	return s, true, nil
}

// lastHeartbeats hands fn every node's last heartbeat and when the broker
// stored it, or why it does not decode.
func (c *Client) lastHeartbeats(ctx context.Context, fn func(node string, hb *linkproto.Heartbeat, heard time.Time, problem string)) error {
	heartbeats, err := c.store.Stream(ctx, linkproto.HeartbeatsStream)
	if err != nil {
		return err
	}
	type beat struct {
		node, problem string
		hb            *linkproto.Heartbeat
		heard         time.Time
	}
	err = decodeAside(func(put func(jetstream.Msg)) error {
		return readLast(ctx, heartbeats, linkproto.AllHeartbeats(c.Mesh), put)
	}, func(m jetstream.Msg) beat {
		_, node, err := linkproto.NodeOf(m.Subject())
		if err != nil {
			return beat{}
		}
		var heard time.Time
		if md, err := m.Metadata(); err == nil {
			heard = md.Timestamp
		}
		hb, err := decodeHeartbeat(m.Data())
		if err != nil {
			return beat{node: node, heard: heard, problem: err.Error()}
		}
		return beat{node: node, hb: hb, heard: heard}
	}, func(b beat) {
		if b.node != "" {
			fn(b.node, b.hb, b.heard, b.problem)
		}
	})
	if err != nil {
		return fmt.Errorf("read the heartbeats: %w", err)
	}
	return nil
}

// eachDesired hands fn every node's stored revision. The documents are
// read and let go: a listing of 10,000 nodes held every one of them.
func (c *Client) eachDesired(ctx context.Context, fn func(node string, revision uint64)) error {
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return err
	}
	type stored struct {
		node     string
		revision uint64
	}
	err = decodeEach(func(put func(jetstream.KeyValueEntry)) error { return desired.Each(ctx, put) }, func(e jetstream.KeyValueEntry) (stored, error) {
		// Only the revision is wanted: the envelope alone is read.
		node, d, err := desired.Listed(e, store.EnvelopeOnly)
		if err != nil || node == "" {
			return stored{}, err
		}
		return stored{node, d.Revision}, nil
	}, func(s stored) {
		if s.node != "" {
			fn(s.node, s.revision)
		}
	})
	if err != nil {
		return fmt.Errorf("list the desired state: %w", err)
	}
	return nil
}

// decodeEntries hands use every entry of kv whose key filter matches, as
// decode makes it (aside, decodeAside), and fails with decode's error if
// an entry does not decode.
func decodeEntries[T any](ctx context.Context, kv jetstream.KeyValue, filter string, decode func(jetstream.KeyValueEntry) (T, error), use func(T)) error {
	return decodeEach(func(put func(jetstream.KeyValueEntry)) error {
		return store.EachEntry(ctx, kv, filter, put)
	}, decode, use)
}

// decodeEach is decodeEntries over the entries read hands out.
func decodeEach[T any](read func(put func(jetstream.KeyValueEntry)) error, decode func(jetstream.KeyValueEntry) (T, error), use func(T)) error {
	type entry struct {
		v   T
		err error
	}
	var failed error
	err := decodeAside(read, func(e jetstream.KeyValueEntry) (d entry) {
		d.v, d.err = decode(e)
		return d
	}, func(d entry) {
		if d.err != nil {
			failed = cmp.Or(failed, d.err)
			return
		}
		use(d.v)
	})
	return cmp.Or(err, failed)
}

// readBatch is how many messages readLast asks for at once.
const readBatch = 5000

// readLast hands fn the last message of every subject of stream that
// filter matches, through one consumer: a request for thousands of
// messages rather than one a subject, which at 10,000 nodes was most of
// `meshctl nodes`. A message stored meanwhile may be handed too.
func readLast(ctx context.Context, stream jetstream.Stream, filter string, fn func(jetstream.Msg)) error {
	p, err := store.NewPuller(ctx, stream, jetstream.ConsumerConfig{
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	stalled, err := p.Drain(ctx, readBatch, dialTimeout, func(m jetstream.Msg, _ *jetstream.MsgMetadata) bool {
		fn(m)
		return true
	})
	if err == nil && stalled > 0 {
		err = fmt.Errorf("%d messages pending, none delivered within %s", stalled, dialTimeout)
	}
	return err
}

func stateOf(s NodeStatus, now time.Time) string {
	hb := s.Heartbeat
	switch cr := s.Credential; {
	case cr != nil && !cr.Revoked.IsZero():
		return StateRevoked
	case cr != nil && !now.Before(cr.Expires):
		return StateExpired
	case s.Problem != "":
		return StateUnreadable
	case hb == nil:
		return StateNeverHeard
	}
	p := s.Presence
	// A connection opened since the last heartbeat: the node is back, and
	// its next heartbeat (sent at once) will say how it stands.
	back := p != nil && p.Connected && p.At.After(s.Heard)
	switch {
	case hb.Stopping != "" && !back:
		return StateOffline
	case p != nil && !p.Connected && p.At.After(s.Heard):
		return StateDisconnected
	}
	interval := time.Duration(hb.Interval)
	if interval <= 0 {
		interval = defaultInterval
	}
	switch {
	case now.Sub(hb.Sent) > silentAfter*interval:
		return StateSilent
	case hb.Local != nil:
		return StateLocal
	case s.Release != "" && slices.Contains(hb.Bad, s.Release):
		return StateRolledBack
	case hb.Applied < s.Desired:
		return StateBehind
	case hb.Result == event.ResultFailed || hb.LastGood < hb.Desired && hb.Failed > 0:
		return StateFailed
	}
	return StateOK
}

// reasonOf says why a node is in its state, for the failed, rolled back,
// offline and disconnected ones.
func reasonOf(s NodeStatus, now time.Time) string {
	hb := s.Heartbeat
	switch s.State {
	case StateOffline:
		return fmt.Sprintf("%s (%s ago, at %s)", hb.Stopping, now.Sub(hb.Sent).Round(time.Second), hb.Sent.UTC().Format(time.RFC3339))
	case StateDisconnected:
		p := s.Presence
		why := p.Reason
		if why == "" {
			why = "no reason given"
		}
		return fmt.Sprintf("its connection closed %s ago, at %s: %s", now.Sub(p.At).Round(time.Second), p.At.UTC().Format(time.RFC3339), why)
	case StateRolledBack:
		return fmt.Sprintf("release %s failed to start; running %s, the known-good version", short(s.Release), VersionLabel(hb.Build, hb.Version))
	case StateFailed:
		last := "none"
		if hb.LastGood != 0 {
			last = fmt.Sprint(hb.LastGood)
		}
		return fmt.Sprintf("last good %s, desired %d: %d failed", last, hb.Desired, hb.Failed)
	}
	return ""
}

// VersionLabel names a version for a table: its build label and its
// digest cut short ("next 0f4e5a1c9d2b"), the label alone when the version
// is not a digest, "-" for none. --json has them whole.
func VersionLabel(build, version string) string {
	switch {
	case version == "" && build == "":
		return "-"
	case version == "" || build == version:
		return build
	case build == "" || len(strings.TrimPrefix(version, "sha256:")) < 64:
		return short(version)
	}
	return build + " " + short(version)
}

// short is a version or digest cut for a table.
func short(v string) string {
	v = strings.TrimPrefix(v, "sha256:")
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

// releaseFor is the host version node's stored declaration delivers, read
// again by itself; "" for none, or one that cannot be read.
func (c *Client) releaseFor(ctx context.Context, node string) string {
	d, err := c.storedFor(ctx, node)
	if err != nil || d == nil {
		return ""
	}
	for _, r := range d.Resources {
		if a, ok := r.(*drivers.ArchiveSpec); ok && isRelease(a) {
			return strings.TrimPrefix(a.Digest, "sha256:")
		}
	}
	return ""
}

// Select keeps the nodes whose labels sel matches.
func Select(nodes []NodeStatus, sel labels.Selector) []NodeStatus {
	var out []NodeStatus
	for _, n := range nodes {
		if sel.Matches(n.Labels) {
			out = append(out, n)
		}
	}
	return out
}

// presences is every node's presence as the broker last told it; none
// when the bucket is not there (a control plane from before presence).
func (c *Client) presences(ctx context.Context) (map[string]store.Presence, error) {
	out := map[string]store.Presence{}
	ps, err := c.store.Presences(ctx, c.Mesh)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	// A record that does not decode is left out: the heartbeats still
	// tell how the node stands.
	err = decodeAside(func(put func(jetstream.KeyValueEntry)) error { return ps.Each(ctx, put) }, func(e jetstream.KeyValueEntry) *store.Presence {
		p, err := ps.Decode(e)
		if err != nil || linkproto.ValidName(p.Node) != nil || e.Key() != store.Key(c.Mesh, p.Node) {
			return nil
		}
		return &p
	}, func(p *store.Presence) {
		if p != nil {
			out[p.Node] = *p
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list the presence: %w", err)
	}
	return out, nil
}

// Away is how a node that is not connected, or not heard from, was last
// heard of: what `meshctl status NODE` says of its link instead of what
// its last report says.
type Away struct {
	// State is StateSilent, StateOffline or StateDisconnected.
	State, Reason string
	// Sent is when its latest heartbeat was sent.
	Sent time.Time
}

// Away says whether node is silent, offline or disconnected, read from its
// latest heartbeat, its presence and its credential alone; nil when it is
// none of those (heard recently, or never).
func (c *Client) Away(ctx context.Context, node string) (*Away, error) {
	if err := linkproto.ValidName(node); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	s := NodeStatus{Node: node}
	heartbeats, err := c.store.Stream(ctx, linkproto.HeartbeatsStream)
	if err != nil {
		return nil, err
	}
	m, err := heartbeats.GetLastMsgForSubject(ctx, linkproto.HeartbeatSubject(c.Mesh, node))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("the heartbeat of %s: %w", node, err)
	}
	hb, err := decodeHeartbeat(m.Data)
	if err != nil {
		return nil, nil // unreadable: nothing to say of its link
	}
	s.Heartbeat, s.Heard = hb, m.Time
	if ps, err := c.store.Presences(ctx, c.Mesh); err == nil {
		if p, _, err := ps.Get(ctx, node); err == nil && p != nil && p.Node == node {
			s.Presence = p
		}
	}
	if kv, err := c.store.KV(ctx, linkproto.NodesBucket); err == nil {
		if cr, _, err := store.Credential(ctx, kv, c.Mesh, node); err == nil {
			s.Credential = cr
		}
	}
	now := c.Now()
	s.State = stateOf(s, now)
	if !Unreachable(s.State) {
		return nil, nil
	}
	a := &Away{State: s.State, Reason: reasonOf(s, now), Sent: hb.Sent}
	if s.State == StateOffline {
		a.Reason = hb.Stopping // its time is Sent's
	}
	return a, nil
}
