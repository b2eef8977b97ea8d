package link

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Credentials is the node's credentials as the link renews them.
type Credentials interface {
	// Current says which public key the credentials are for, when they
	// were issued and when they expire.
	Current() (key string, issued, expires time.Time, err error)
	// Replace stores token, a JWT signed for the same key, as what the
	// next connection presents.
	Replace(token string) error
}

// Renewal retries, while the control plane does not answer or refuses,
// from renewRetryMin doubling to renewRetryMax; the credentials are looked
// at again at least every renewLookEvery (they may be replaced by an
// enrolment meanwhile).
const (
	renewRetryMin  = time.Second
	renewRetryMax  = time.Minute
	renewLookEvery = time.Hour
)

// renewDue is when node's credentials issued at issued and expiring at
// expires are renewed: when between a half and a third of their lifetime
// is left, so that a control plane down for a while is outlived. Where in
// that sixth is fixed by the node's name: the nodes of a batch enrolment,
// whose credentials were all issued in the same minute, would otherwise
// all ask at once, and then all reconnect at once.
func renewDue(node string, issued, expires time.Time) time.Time {
	h := fnv.New64a()
	h.Write([]byte(node))
	spread := float64(h.Sum64()>>11) / (1 << 53) // in [0, 1)
	life := expires.Sub(issued)
	return issued.Add(life/2 + time.Duration(spread*float64(life/6)))
}

// renewals renews the credentials when due, until ctx ends or a renewal
// succeeds (the link then reconnects onto them, which ends the session).
func (l *Link) renewals(ctx context.Context, nc *nats.Conn) {
	if l.cfg.Credentials == nil {
		return
	}
	for attempt := 0; ; {
		key, issued, expires, err := l.cfg.Credentials.Current()
		wait := renewLookEvery
		if err != nil {
			l.log.Error("read the credentials", "err", err)
		} else if due := renewDue(l.cfg.Node, issued, expires); l.cfg.Now().Before(due) {
			wait = min(due.Sub(l.cfg.Now()), renewLookEvery)
		} else {
			err := l.renew(ctx, nc, key)
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				return
			}
			wait = backoff(attempt, renewRetryMin, renewRetryMax)
			attempt++
			l.log.Warn("credentials not renewed; trying again", "err", err, "expires", expires, "retry_in", wait.Round(time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// renew asks a control service for the credentials signed again for key,
// stores them, journals link.renewed and reconnects onto them: the broker
// ends a connection when the credentials it was made with expire, so the
// connection must be made again with the new ones.
func (l *Link) renew(ctx context.Context, nc *nats.Conn, key string) error {
	req := linkproto.Renew{Protocol: linkproto.ProtocolVersion, Node: l.cfg.Node, Key: key, Nonce: linkproto.NewNonce()}
	subj := linkproto.RenewSubject(l.cfg.Mesh, l.cfg.Node)
	rctx, cancel := context.WithTimeout(ctx, l.cfg.HelloTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, subj, linkproto.Marshal(req))
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	c, err := credential(m.Data, l.cfg.Trust, l.cfg.Mesh, l.cfg.Node, req.Nonce)
	if err != nil {
		if !errors.Is(err, ErrRefused) {
			l.refuse(subj, "credential: "+err.Error(), len(m.Data))
		} else {
			l.refuse(subj, err.Error(), len(m.Data))
		}
		return err
	}
	claims, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil || claims.Subject != key {
		err = fmt.Errorf("the renewed credentials are not for this node's key %s (%v)", key, err)
		l.refuse(subj, err.Error(), len(m.Data))
		return err
	}
	if err := l.cfg.Credentials.Replace(c.JWT); err != nil {
		return fmt.Errorf("store the renewed credentials: %w", err)
	}
	if _, err := l.j.Append(event.New(event.LinkRenewed, 0, "", event.LinkRenewedPayload{Key: key, Expires: c.Expires})); err != nil {
		l.log.Error("journal link.renewed", "err", err)
	}
	l.log.Info("credentials renewed", "expires", c.Expires)
	l.st.expect("reconnecting with renewed credentials")
	if err := nc.ForceReconnect(); err != nil {
		l.log.Warn("reconnect with the renewed credentials", "err", err)
	}
	return nil
}
