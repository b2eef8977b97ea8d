package link

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// onDeclaration handles a push. Whatever arrives is answered (when it asks
// for an answer) and never ends the link: a message that is not a
// declaration for this node is refused here, a declaration is the host's to
// accept or refuse.
func (l *Link) onDeclaration(ctx context.Context, m *nats.Msg) {
	defer func() {
		if p := recover(); p != nil {
			reason := fmt.Sprintf("internal error handling the message: %v", p)
			l.log.Error("declaration handler panicked", "panic", p, "stack", string(debug.Stack()))
			l.refuse(m.Subject, reason, len(m.Data))
			l.reply(m, l.refusedAck(0, reason))
		}
	}()
	d, err := l.decodeDeclaration(m.Data)
	if err != nil {
		revision := uint64(0)
		if d != nil {
			revision = d.Revision
		}
		l.refuse(m.Subject, err.Error(), len(m.Data))
		l.reply(m, l.refusedAck(revision, err.Error()))
		return
	}
	ack := l.host.Accept(ctx, d, event.TriggerPushed)
	ack.Protocol, ack.Node, ack.Revision = linkproto.ProtocolVersion, l.cfg.Node, d.Revision
	ack.Reason = clip(ack.Reason, maxReason)
	l.log.Info("declaration pushed", "revision", d.Revision, "accepted", ack.Accepted, "seq", ack.Seq, "reason", ack.Reason)
	l.reply(m, ack)
}

// decodeDeclaration decodes a declaration for this node and checks that
// the mesh signed it; nothing else reaches the host. On a refusal of a
// declaration that decoded, the declaration is returned with the error,
// for its revision.
func (l *Link) decodeDeclaration(data []byte) (*linkproto.Declaration, error) {
	d, err := linkproto.DecodeDeclaration(data, l.cfg.Mesh, l.cfg.Node)
	if err != nil {
		return nil, err
	}
	if err := d.Verify(l.cfg.Trust); err != nil {
		return d, fmt.Errorf("declaration revision %d refused: %w", d.Revision, err)
	}
	return d, nil
}

func (l *Link) refusedAck(revision uint64, reason string) linkproto.Ack {
	return linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: l.cfg.Node, Revision: revision, Reason: clip(reason, maxReason)}
}

func (l *Link) reply(m *nats.Msg, ack linkproto.Ack) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(linkproto.Marshal(ack)); err != nil {
		l.log.Warn("answer a declaration", "revision", ack.Revision, "err", err)
	}
}

// refuse journals a message the link refused, as link.refused, at most
// refusalsPerMinute a minute: a flood is counted, not recorded one by one.
func (l *Link) refuse(subject, reason string, size int) {
	l.log.Warn("refused a message", "subject", subject, "bytes", size, "reason", reason)
	p, ok := l.refusals.admit(l.cfg.Now())
	if !ok {
		return
	}
	p.Subject, p.Reason, p.Bytes = subject, clip(reason, maxReason), size
	if _, err := l.j.Append(event.New(event.LinkRefused, 0, "", p)); err != nil {
		l.log.Error("journal link.refused", "err", err)
	}
}

// refusalLimiter lets refusalsPerMinute refusals a minute be journaled and
// counts the rest.
type refusalLimiter struct {
	mu         sync.Mutex
	window     time.Time // start of the current minute
	journaled  int       // in the current minute
	suppressed int       // since the last one journaled
}

// admit says whether a refusal at now is journaled; if so, p carries the
// count suppressed before it.
func (r *refusalLimiter) admit(now time.Time) (p event.LinkRefusedPayload, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.window) >= time.Minute || now.Before(r.window) {
		r.window, r.journaled = now, 0
	}
	if r.journaled >= refusalsPerMinute {
		r.suppressed++
		return p, false
	}
	r.journaled++
	p.Suppressed, r.suppressed = r.suppressed, 0
	return p, true
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// backoff is the delay before retry attempt (from 0): lo doubling up to
// hi, with ±20 % jitter so a fleet does not retry in step.
func backoff(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(d))
	return d + jitter
}
