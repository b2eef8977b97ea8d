package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// DeclareOptions says how long Declare waits for the node.
type DeclareOptions struct {
	// PushTimeout bounds the wait for the node's Ack; zero means 3 s.
	// Past it the node counts as offline.
	PushTimeout time.Duration
	// Wait bounds the wait for a heartbeat reporting the apply; zero does
	// not wait.
	Wait time.Duration
	// Reclaim signs the declaration as a reclaim: it takes the node back
	// from a local override (`mesh-host apply --local`), which refuses
	// every other declaration. It is stored with the desired state, so a
	// node offline now is reclaimed by its next hello.
	Reclaim bool
}

// welcomeRoom is what a Welcome adds around its Declaration: a stored
// declaration must still fit the broker's payload limit inside one.
const welcomeRoom = 1 << 10

// Declare stores d as node's desired state and pushes it to the node,
// writing what happens to out. It refuses (ErrDeclarationRefused) a declaration for
// another mesh or node, one older than the stored one, and one that reuses
// the stored revision with other content. A node that does not answer is
// offline, which is normal: it gets the declaration with its next hello.
func (c *Client) Declare(ctx context.Context, out io.Writer, node string, d *declaration.Declaration, opt DeclareOptions) error {
	_, err := c.declare(ctx, out, node, d, opt)
	return err
}

// declare is Declare, saying also whether the node answered the push.
func (c *Client) declare(ctx context.Context, out io.Writer, node string, d *declaration.Declaration, opt DeclareOptions) (online bool, err error) {
	read, err := c.readStored(ctx, node)
	if err != nil {
		return false, err
	}
	d, notes, err := numbered(node, d, read)
	if err != nil {
		return false, err
	}
	push, err := c.prepareOverAs(ctx, node, d, read, opt.Reclaim)
	if err != nil {
		return false, err
	}
	// Said once stored: a refused declaration was numbered nothing.
	for _, note := range notes {
		fmt.Fprintln(out, note)
	}

	// Listen for the node's report before pushing, so a quick apply's
	// heartbeat is not missed.
	heartbeats, err := c.Conn.SubscribeSync(linkproto.HeartbeatSubject(c.Mesh, node))
	if err != nil {
		return false, err
	}
	defer heartbeats.Unsubscribe()
	if err := c.Conn.Flush(); err != nil {
		return false, err
	}

	ack, err := c.pushStored(node, push, opt.PushTimeout)
	if err != nil || ack == nil {
		if ack == nil && err == nil {
			fmt.Fprintf(out, "%s is offline: it will get revision %d when it reconnects\n", node, push.Revision)
		}
		return err != nil, err
	}
	fmt.Fprintf(out, "%s accepted revision %d (journal #%d)\n", node, push.Revision, ack.Seq)
	if push.Reclaim {
		fmt.Fprintf(out, "%s: signed as a reclaim: a local override on the node ends with it\n", node)
	}
	if opt.Wait <= 0 {
		return true, nil
	}
	hb, err := c.waitApplied(ctx, heartbeats, node, push.Revision, opt.Wait, push.Reclaim)
	if err != nil {
		return true, err
	}
	fmt.Fprintf(out, "%s applied revision %d: %s; owned %d, drifted %d, failed %d\n", node, hb.Applied, hb.Result, hb.Owned, hb.Drifted, hb.Failed)
	if hb.Result == event.ResultFailed || hb.Failed > 0 {
		return true, fmt.Errorf("%w: %s reports %s (see `meshctl journal %s`)", ErrApplyFailed, node, whyFailed(hb), node)
	}
	return true, nil
}

// whyFailed says why a node reports its revision failed: resources that
// failed to apply, or else drift it found and left as it was (a check
// with --no-repair), or else the reconcile itself (its journal refused).
func whyFailed(hb *linkproto.Heartbeat) string {
	switch {
	case hb.Failed > 0:
		return plural(hb.Failed, "failed resource")
	case hb.Drifted > 0:
		return plural(hb.Drifted, "drifted resource") + " it has not repaired"
	}
	return "a failed reconcile"
}

// prepare seals d's secrets to node, signs it, and stores it as node's
// desired state, returning the push to send: what the node gets with its
// next hello, whether or not it answers a push now.
func (c *Client) prepare(ctx context.Context, node string, d *declaration.Declaration) (*linkproto.Declaration, error) {
	read, err := c.readStored(ctx, node)
	if err != nil {
		return nil, err
	}
	return c.prepareOver(ctx, node, d, read)
}

// prepareOver is prepare over read, node's entry as read already (nil:
// none): a rollout reads it to render, and a second read would cost each
// node another round trip and decode.
func (c *Client) prepareOver(ctx context.Context, node string, d *declaration.Declaration, read *store.Entry) (*linkproto.Declaration, error) {
	return c.prepareOverAs(ctx, node, d, read, false)
}

// prepareOverAs is prepareOver, signing the push as a reclaim when
// reclaim is set.
func (c *Client) prepareOverAs(ctx context.Context, node string, d *declaration.Declaration, read *store.Entry, reclaim bool) (*linkproto.Declaration, error) {
	push, d, err := c.sealedPush(ctx, node, d)
	if err != nil {
		return nil, err
	}
	push.Reclaim = reclaim
	if err := c.sign(push); err != nil {
		return nil, err
	}
	return c.storeDesired(ctx, node, d, push, read)
}

// sealedPush is d with its secrets sealed to node, and as a push, not yet
// signed: checked as Push checks it.
func (c *Client) sealedPush(ctx context.Context, node string, d *declaration.Declaration) (*linkproto.Declaration, *declaration.Declaration, error) {
	d, err := c.seal(ctx, node, d)
	if err != nil {
		return nil, nil, err
	}
	push, err := Push(d, c.Mesh, node)
	if err != nil {
		return nil, nil, err
	}
	return push, d, nil
}

// pushStored pushes a stored declaration to its node and checks the ack.
// A node that does not answer within timeout (zero: 3 s) is offline,
// which is normal: the ack is nil and so is the error.
func (c *Client) pushStored(node string, push *linkproto.Declaration, timeout time.Duration) (*linkproto.Ack, error) {
	if timeout == 0 {
		timeout = 3 * time.Second
	}
	reply, err := c.Conn.Request(linkproto.DeclarationSubject(c.Mesh, node), linkproto.Marshal(push), timeout)
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("push revision %d to %s: %w", push.Revision, node, err)
	}
	var ack linkproto.Ack
	if err := linkproto.Decode(reply.Data, linkproto.MaxReportSize, &ack); err != nil {
		return nil, fmt.Errorf("%s answered the push with something other than an ack: %w", node, err)
	}
	if ack.Node != node || ack.Revision != push.Revision {
		return nil, fmt.Errorf("%s answered the push of revision %d with an ack of %s's revision %d", node, push.Revision, ack.Node, ack.Revision)
	}
	if !ack.Accepted {
		return nil, fmt.Errorf("%w: %s refused revision %d: %s", ErrDeclarationRefused, node, push.Revision, ack.Reason)
	}
	return &ack, nil
}

// Push checks that d can be declared for node of mesh, as far as that
// can be known without the stored state, and returns it as a push. It
// refuses (ErrDeclarationRefused) a declaration for another mesh or node, and one too
// large to travel: over declaration.MaxBytes as JSON, its secrets sealed,
// or over the limit for a push (linkproto.MaxDeclarationSize).
func Push(d *declaration.Declaration, mesh, node string) (*linkproto.Declaration, error) {
	if err := linkproto.ValidName(node); err != nil {
		return nil, fmt.Errorf("%w: node: %w", ErrDeclarationRefused, err)
	}
	switch {
	case d.Mesh != mesh:
		return nil, fmt.Errorf("%w: it is for mesh %q; this control plane serves mesh %q", ErrDeclarationRefused, d.Mesh, mesh)
	case d.Node != node:
		return nil, fmt.Errorf("%w: it is for node %q, not %q", ErrDeclarationRefused, d.Node, node)
	}
	doc, err := d.MarshalJSON()
	if err != nil {
		return nil, err
	}
	// The node holds the document it receives to the parser's limits:
	// sealed, a secret is larger than its name, so a declaration that
	// parsed here may be over them now.
	if err := declaration.CheckJSONSize(doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDeclarationRefused, err)
	}
	push := &linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: mesh, Node: node, Revision: d.Revision, Document: doc}
	if n := len(linkproto.Marshal(push)); n > linkproto.MaxDeclarationSize-welcomeRoom {
		// declaration.MaxBytes is larger than a message: a declaration
		// between the two is one a node takes only from a file.
		return nil, fmt.Errorf("%w: it is %d bytes; a declaration travels in one message of at most %d, the limit for a push (a larger one, up to %d bytes, is applied on the node with `mesh-host apply --local FILE`, a local override until the mesh reclaims it)",
			ErrDeclarationRefused, n, linkproto.MaxDeclarationSize-welcomeRoom, declaration.MaxBytes)
	}
	return push, nil
}

// sign names the operator in push and signs it with the mesh's declaration
// key. What is stored and pushed is the signed push, so a welcome forwards
// the signature as it was made and the broker holds nothing it could alter
// unnoticed.
func (c *Client) sign(push *linkproto.Declaration) error {
	if c.Key == nil {
		return errors.New("no declaration key to sign with (the authority's declarations.nk)")
	}
	if err := linkproto.ValidOperator(c.Operator); err != nil {
		return fmt.Errorf("%w: %v (give --operator)", ErrDeclarationRefused, err)
	}
	push.Operator = c.Operator
	return push.Sign(c.Key)
}

// seal seals the secrets d names to node, when it names any.
func (c *Client) seal(ctx context.Context, node string, d *declaration.Declaration) (*declaration.Declaration, error) {
	if !namesSecrets(d) {
		return d, nil
	}
	if c.Secrets == nil {
		return nil, fmt.Errorf("%w: the declaration names secrets, and this client has no secret store", ErrDeclarationRefused)
	}
	keys, err := c.store.KV(ctx, linkproto.SealKeysBucket)
	if err != nil {
		return nil, err
	}
	return sealFor(c.Secrets, ctx, keys, c.Mesh, node, d)
}

func namesSecrets(d *declaration.Declaration) bool {
	return slices.ContainsFunc(d.Resources, drivers.NamesSecret)
}

// store puts the signed push into the desired-state bucket unless it is
// already there, refusing to go back a revision or to reuse one, and
// returns what to push: the stored push when the same declaration is
// declared again (its secrets sealed anew would make it differ, and the
// node holds the stored one). read is the entry as read before (nil:
// none), and the write is conditional on it, so two operators declaring
// at once cannot both win.
func (c *Client) storeDesired(ctx context.Context, node string, d *declaration.Declaration, push *linkproto.Declaration, read *store.Entry) (*linkproto.Declaration, error) {
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	if read == nil {
		err = desired.Create(ctx, node, push)
	} else {
		stored := read.Declaration()
		// Sealed anew, a secret differs in its bytes: the same revision is
		// the same declaration when what the operator named is.
		same := func() bool { return withoutSealed(d).Digest() == withoutSealed(stored).Digest() }
		switch {
		case d.Revision < stored.Revision:
			return nil, fmt.Errorf("%w: %s is at revision %d; revision %d is older%s", ErrDeclarationRefused, node, stored.Revision, d.Revision, omitRevision)
		case d.Revision == stored.Revision && !same():
			return nil, fmt.Errorf("%w: revision %d of %s is already stored with other content: bump the revision%s", ErrDeclarationRefused, d.Revision, node, omitRevision)
		case d.Revision == stored.Revision && (!push.Reclaim || read.Push.Reclaim):
			// The same declaration again: push the stored one again,
			// store nothing.
			return read.Push, nil
		}
		err = desired.Update(ctx, node, push, read.Revision)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, fmt.Errorf("%w: %s was declared by someone else meanwhile; look, then declare again", ErrDeclarationRefused, node)
	}
	if err != nil {
		return nil, fmt.Errorf("store the desired state of %s: %w", node, err)
	}
	return push, nil
}

// omitRevision ends a refusal of a file's stated revision: a release or
// a rollout numbers the declarations it stores, which a file cannot know.
const omitRevision = " (or leave `revision` out of the file, and the mesh numbers it after the stored one)"

// waitApplied waits for node's heartbeat reporting revision or a later one
// applied: the latest one stored, if it already does, or one arriving on
// sub. A reclaim is applied once the node applied the revision it
// desires, with no local override: the override's revision, applied
// before, may be higher.
func (c *Client) waitApplied(ctx context.Context, sub *nats.Subscription, node string, revision uint64, wait time.Duration, reclaim bool) (*linkproto.Heartbeat, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	reached := func(hb *linkproto.Heartbeat) bool {
		if reclaim && (hb.Local != nil || hb.Applied != hb.Desired) {
			return false
		}
		return hb.Applied >= revision
	}
	if hb, err := c.lastHeartbeat(ctx, node); err == nil && hb != nil && reached(hb) {
		return hb, nil
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %s did not report applying revision %d within %v", ErrNotApplied, node, revision, wait)
		}
		if err != nil {
			return nil, err
		}
		hb, err := decodeHeartbeat(m.Data)
		if err != nil {
			continue
		}
		if reached(hb) {
			return hb, nil
		}
	}
}

// lastHeartbeat is node's latest heartbeat in the heartbeats stream; nil
// for none.
func (c *Client) lastHeartbeat(ctx context.Context, node string) (*linkproto.Heartbeat, error) {
	s, err := c.store.Stream(ctx, linkproto.HeartbeatsStream)
	if err != nil {
		return nil, err
	}
	m, err := s.GetLastMsgForSubject(ctx, linkproto.HeartbeatSubject(c.Mesh, node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeHeartbeat(m.Data)
}
