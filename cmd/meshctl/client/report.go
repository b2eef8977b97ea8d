package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// ErrNoReport is returned when a node has sent no report the states stream
// holds.
var ErrNoReport = errors.New("no report")

// Reported is a node's latest report and how it stands against its latest
// heartbeat.
type Reported struct {
	linkproto.Report
	// Digest is the report's; Current says the node's latest heartbeat
	// names it (false: a newer report is on its way, or was lost).
	Digest  string
	Current bool
}

// Report returns node's latest report: its projection as it sent it.
func (c *Client) Report(ctx context.Context, node string) (*Reported, error) {
	if err := linkproto.ValidName(node); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	states, err := c.store.Stream(ctx, linkproto.StatesStream)
	if err != nil {
		return nil, err
	}
	m, err := states.GetLastMsgForSubject(ctx, linkproto.StateSubject(c.Mesh, node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		// A name the mesh has never heard of is most likely a typo: say
		// so, rather than that it has not reported yet.
		if kerr := c.MustKnow(ctx, node); errors.Is(kerr, ErrUnknownNode) {
			return nil, kerr
		}
		return nil, fmt.Errorf("%w from %s in mesh %s: it has not reported since it was enrolled (or runs a host from before reports)", ErrNoReport, node, c.Mesh)
	}
	if err != nil {
		return nil, fmt.Errorf("the report of %s: %w", node, err)
	}
	var r Reported
	if err := linkproto.DecodeReport(m.Data, m.Header.Get(linkproto.EncodingHeader), &r.Report); err != nil {
		return nil, fmt.Errorf("the report of %s: %w", node, err)
	}
	if r.Mesh != c.Mesh || r.Node != node {
		return nil, fmt.Errorf("the report on %s's subject says it is of %s/%s", node, r.Mesh, r.Node)
	}
	r.Digest = linkproto.ReportDigest(r.Report)
	if hb, err := c.lastHeartbeat(ctx, node); err == nil && hb != nil {
		r.Current = hb.Report == r.Digest
	}
	return &r, nil
}

// Replayed is a node's projection rebuilt from its records in the events
// stream with the host's own projector.
type Replayed struct {
	State projector.State
	// Records is how many were folded, the first being #1.
	Records uint64
}

// Replay rebuilds node's projection from its records in the events stream,
// through record until (0: every record there). The records must start at
// #1 and run without a gap: a projection is a fold from the first record.
func (c *Client) Replay(ctx context.Context, node string, until uint64) (*Replayed, error) {
	var s projector.State
	var n, next uint64 = 0, 1
	err := c.Records(ctx, node, 1, func(r event.Record) error {
		if until != 0 && r.Seq > until {
			return errStop
		}
		if r.Seq != next {
			if next == 1 {
				return fmt.Errorf("the events stream holds %s's records from #%d: the first are gone (its max age), so its projection cannot be rebuilt from them", node, r.Seq)
			}
			return fmt.Errorf("the events stream lacks %s's record #%d (it holds #%d next): the projection cannot be rebuilt past it", node, next, r.Seq)
		}
		s = projector.Fold(s, r)
		n, next = n+1, next+1
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	if until != 0 && n < until {
		return nil, fmt.Errorf("the events stream holds %s's records through #%d, not #%d: the node has not sent the rest yet", node, n, until)
	}
	return &Replayed{State: s, Records: n}, nil
}

// errStop ends a Records scan early.
var errStop = errors.New("stop")

// Verify rebuilds node's projection from the events stream through the head
// of its latest report, and compares the two: nil lines when they agree.
// It is the fleet's proof that a node is what it says it is.
func (c *Client) Verify(ctx context.Context, node string) (rep *Reported, replayed *Replayed, diff []string, err error) {
	rep, err = c.Report(ctx, node)
	if err != nil {
		return nil, nil, nil, err
	}
	replayed, err = c.Replay(ctx, node, rep.State.Head)
	if err != nil {
		return rep, nil, nil, err
	}
	want := linkproto.StrippedForReport(replayed.State)
	if rep.Omitted != "" {
		want.Owned = nil
	}
	return rep, replayed, projector.Diff(want, rep.State), nil
}
