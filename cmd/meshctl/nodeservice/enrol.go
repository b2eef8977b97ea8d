package nodeservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/sealing"
)

// defaultCredentialTTL is how long a node's credentials are valid; the
// node renews them over its link well before.
const defaultCredentialTTL = 30 * 24 * time.Hour

// CredentialIssuer signs node credentials and revokes node keys: what
// the control service needs of the authority to enrol and renew.
type CredentialIssuer interface {
	NodeJWT(node, key string, ttl time.Duration) (string, time.Time, error)
	Revoke(ctx context.Context, keys ...string) error
}

// tokenUse is a token's record in the TokensBucket: created when it is
// redeemed, so a second redemption finds it.
type tokenUse struct {
	Node string    `json:"node"`
	Key  string    `json:"key"`
	Used time.Time `json:"used"`
}

// enrol answers one Enrol: a host presenting its token with the public
// half of the key it made. The reasons it refuses are told to the host
// and logged, and nothing is issued then. The answer goes only where the
// token's bootstrap user listens.
func (s *Service) enrol(ctx context.Context, b *store.Handles, m *nats.Msg) {
	var req linkproto.Enrol
	answerRequest(ctx, s, m, request[linkproto.Credential]{
		what:      "enrolment",
		fromToken: true,
		from: func(subject string) (string, string, error) {
			id := strings.TrimPrefix(subject, strings.TrimSuffix(linkproto.AllEnrols(s.Mesh), "*"))
			return id, linkproto.EnrolledPrefix(s.Mesh, id), nil
		},
		decode: func(data []byte) (string, error) {
			return "", linkproto.Decode(data, linkproto.MaxReportSize, &req)
		},
		answer: func(ctx context.Context, id string) (linkproto.Credential, error) {
			node, answer, err := s.redeem(ctx, b, id, req)
			if s.Enrolled != nil {
				s.Enrolled(err == nil)
			}
			if err != nil {
				s.Log.Warn("enrolment refused", "token", id, "node", node, "reason", err)
				answer = linkproto.Credential{Node: node, Refused: err.Error()}
			} else {
				s.Log.Info("node enrolled", "node", node, "token", id, "key", req.Key, "expires", answer.Expires)
			}
			answer.Protocol, answer.Nonce = linkproto.ProtocolVersion, req.Nonce
			return answer, nil
		},
		sign: func(a *linkproto.Credential, _ string) error { return a.Sign(s.Key, s.Mesh) },
	})
}

// redeem checks the token and, if it may be, redeems it: once, and only
// before it expires.
func (s *Service) redeem(ctx context.Context, b *store.Handles, id string, req linkproto.Enrol) (node string, _ linkproto.Credential, _ error) {
	pub, _ := s.Key.PublicKey()
	t, err := linkproto.VerifyToken(req.Token, pub, s.Mesh)
	node = t.Node
	switch {
	case err != nil:
		return node, linkproto.Credential{}, err
	case t.ID != id:
		return node, linkproto.Credential{}, fmt.Errorf("%w: the token is %s, presented as %s", linkproto.ErrBadToken, t.ID, id)
	case !nkeys.IsValidPublicUserKey(req.Key):
		return node, linkproto.Credential{}, fmt.Errorf("the key presented, %q, is not a public user nkey (starting with U)", req.Key)
	case sealing.ValidPublicKey(req.SealKey) != nil:
		return node, linkproto.Credential{}, fmt.Errorf("the sealing key presented: %w", sealing.ValidPublicKey(req.SealKey))
	}
	now := s.now()
	if err := t.Expired(now); err != nil {
		return node, linkproto.Credential{}, err
	}
	if err := tokenRefused(ctx, b.Tokens, s.Mesh, t); err != nil {
		return node, linkproto.Credential{}, err
	}
	use := tokenUse{Node: t.Node, Key: req.Key, Used: now.UTC()}
	if _, err := b.Tokens.Create(ctx, store.Key(s.Mesh, t.ID), mustJSON(use)); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return node, linkproto.Credential{}, fmt.Errorf("record the token's use: %w", err)
		}
		var prev tokenUse
		if e, gerr := b.Tokens.Get(ctx, store.Key(s.Mesh, t.ID)); gerr == nil {
			_ = json.Unmarshal(e.Value(), &prev)
		}
		return node, linkproto.Credential{}, fmt.Errorf("%w: it was used at %s to enrol %s; ask for a new one with `meshctl enrol %s`",
			ErrTokenUsed, prev.Used.Format(time.RFC3339), prev.Node, t.Node)
	}
	// The token is spent from here on, whatever happens next: a failure
	// below gives it back, so the host can try again.
	giveBack := func() { _ = b.Tokens.Delete(context.WithoutCancel(ctx), store.Key(s.Mesh, t.ID)) }
	prev, _, err := s.nodeCredential(ctx, b, t.Node)
	if err != nil {
		giveBack()
		return node, linkproto.Credential{}, err
	}
	if prev != nil && prev.Key != req.Key && prev.Key != "" {
		// Enrolling a node again ends its previous key, before the new
		// one exists: never two machines as one node.
		if err := s.Issuer.Revoke(ctx, prev.Key); err != nil {
			giveBack()
			return node, linkproto.Credential{}, fmt.Errorf("revoke the node's previous key: %w", err)
		}
		s.Log.Info("revoked the node's previous key", "node", t.Node, "key", prev.Key)
	}
	token, expires, err := s.Issuer.NodeJWT(t.Node, req.Key, s.credentialTTL())
	if err != nil {
		giveBack()
		return node, linkproto.Credential{}, err
	}
	rec := store.NodeCredential{Node: t.Node, Key: req.Key, Token: t.ID, Enrolled: now.UTC(), Issued: now.UTC(), Expires: expires.UTC()}
	if err := store.PutCredential(ctx, b.Nodes, s.Mesh, rec); err != nil {
		giveBack()
		return node, linkproto.Credential{}, fmt.Errorf("record the node's credential: %w", err)
	}
	// The key the node's secrets are sealed to, told with the token that
	// proves the node: nothing else may set it.
	if err := store.PutSealKey(ctx, b.SealKeys, s.Mesh, t.Node, req.SealKey); err != nil {
		giveBack()
		return node, linkproto.Credential{}, fmt.Errorf("record the node's sealing key: %w", err)
	}
	return node, linkproto.Credential{Node: t.Node, JWT: token, Expires: expires.UTC()}, nil
}

// tokenRefused is why t may not be redeemed: it was made before its node
// was last revoked or removed. A record that cannot be read refuses too.
func tokenRefused(ctx context.Context, tokens jetstream.KeyValue, mesh string, t linkproto.Token) error {
	r, err := store.RefusedTokens(ctx, tokens, mesh, t.Node)
	switch {
	case errors.Is(err, store.ErrUndecodable):
		return fmt.Errorf("%w: %v", ErrTokenRefused, err)
	case err != nil:
		return fmt.Errorf("read whether the tokens of %s are refused: %w", t.Node, err)
	case r == nil:
		return nil
	}
	issued := t.IssuedAt()
	if issued.After(r.Before) {
		return nil
	}
	return fmt.Errorf("%w: it was made at %s, and %s was %s at %s, ending every token made until then; ask for a new one with `meshctl enrol %s`",
		ErrTokenRefused, issued.Format(time.RFC3339), t.Node, r.Why, r.Before.Format(time.RFC3339), t.Node)
}

// renew answers one Renew: the node's credentials signed again, for the
// key on record, unless that key is revoked.
func (s *Service) renew(ctx context.Context, b *store.Handles, m *nats.Msg) {
	var req linkproto.Renew
	answerRequest(ctx, s, m, request[linkproto.Credential]{
		what: "renewal",
		from: s.fromNode,
		decode: func(data []byte) (string, error) {
			err := linkproto.Decode(data, linkproto.MaxReportSize, &req)
			return req.Node, err
		},
		answer: func(ctx context.Context, node string) (linkproto.Credential, error) {
			answer, err := s.renewed(ctx, b, node, req.Key)
			if err != nil {
				s.Log.Warn("renewal refused", "node", node, "reason", err)
				answer = linkproto.Credential{Node: node, Refused: err.Error()}
			} else {
				s.Log.Info("credentials renewed", "node", node, "expires", answer.Expires)
			}
			answer.Protocol, answer.Nonce = linkproto.ProtocolVersion, req.Nonce
			return answer, nil
		},
		sign: func(a *linkproto.Credential, _ string) error { return a.Sign(s.Key, s.Mesh) },
	})
}

func (s *Service) renewed(ctx context.Context, b *store.Handles, node, key string) (linkproto.Credential, error) {
	rec, rev, err := s.nodeCredential(ctx, b, node)
	switch {
	case err != nil:
		return linkproto.Credential{}, err
	case rec == nil:
		return linkproto.Credential{}, fmt.Errorf("%w: %s has no credential on record (enrol it again)", ErrRevoked, node)
	case !rec.Revoked.IsZero():
		return linkproto.Credential{}, fmt.Errorf("%w: %s's key was revoked at %s", ErrRevoked, node, rec.Revoked.Format(time.RFC3339))
	case rec.Key != key:
		return linkproto.Credential{}, fmt.Errorf("%w: the key presented is not the one on record for %s", ErrRevoked, node)
	}
	token, expires, err := s.Issuer.NodeJWT(node, key, s.credentialTTL())
	if err != nil {
		return linkproto.Credential{}, err
	}
	rec.Issued, rec.Expires = s.now().UTC(), expires.UTC()
	// Only over the record read: a revocation in between wins.
	if err := store.UpdateCredential(ctx, b.Nodes, s.Mesh, node, *rec, rev); err != nil {
		return linkproto.Credential{}, fmt.Errorf("record the renewal: %w", err)
	}
	return linkproto.Credential{Node: node, JWT: token, Expires: expires.UTC()}, nil
}

// nodeCredential reads node's record and its revision; nil for none.
func (s *Service) nodeCredential(ctx context.Context, b *store.Handles, node string) (*store.NodeCredential, uint64, error) {
	return store.Credential(ctx, b.Nodes, s.Mesh, node)
}

func (s *Service) credentialTTL() time.Duration {
	if s.CredentialTTL > 0 {
		return s.CredentialTTL
	}
	return defaultCredentialTTL
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("nodeservice: does not encode: " + err.Error())
	}
	return b
}
