package client

import (
	"fmt"
	"time"

	"github.com/mesh-host/mesh-host/linkproto"
)

// StateLocal: the node holds a local override (`mesh-host apply --local`)
// and refuses the mesh's declarations until `meshctl declare NODE FILE
// --reclaim`. It comes after the states that say the node cannot be
// reached or read, and before every state about applying the mesh's
// declaration: the mesh's revision is not what the node holds.
const StateLocal = "local"

// localReason says which override a node holds, from its heartbeat
// (checked as it was decoded), its age measured from now.
func localReason(l *linkproto.LocalReport, now time.Time) string {
	by := ""
	if l.User != "" {
		by = " by " + l.User
	}
	since := ""
	if !l.Since.IsZero() {
		since = " since " + ago(now.Sub(l.Since))
	}
	return fmt.Sprintf("local revision %d from %s%s%s (reclaim: meshctl declare NODE FILE --reclaim)", l.Revision, l.Source, by, since)
}

// ago is an age for a reason: to the second, "just now" for a node whose
// clock is ahead.
func ago(d time.Duration) string {
	if d < 0 {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

// decodeHeartbeat is every read of a heartbeat here: what a node says in
// one is shown on the operator's terminal, kept in a rollout's record and
// its reasons, so it is decoded within the report's bound, a local
// override no host would report is refused, and the reason for stopping
// is fit to show (linkproto.FitPrintable).
func decodeHeartbeat(data []byte) (*linkproto.Heartbeat, error) {
	var hb linkproto.Heartbeat
	if err := linkproto.Decode(data, linkproto.MaxReportSize, &hb); err != nil {
		return nil, err
	}
	if hb.Local != nil {
		if err := hb.Local.Check(); err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
	}
	hb.Stopping = linkproto.FitPrintable(hb.Stopping, linkproto.MaxStoppingBytes)
	return &hb, nil
}
