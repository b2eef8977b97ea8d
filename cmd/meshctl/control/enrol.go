package control

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

// DefaultCredentialTTL is how long a node's credentials are valid; the
// node renews them over its link well before.
const DefaultCredentialTTL = 30 * 24 * time.Hour

// CredentialIssuer signs node credentials and revokes node keys: what
// the control service needs of the authority to enrol and renew.
type CredentialIssuer interface {
	NodeJWT(node, key string, ttl time.Duration) (string, time.Time, error)
	Revoke(ctx context.Context, keys ...string) error
}

// NodeCredential is a node's record in the NodesBucket: the key its
// credentials are signed for (the private half is the node's alone), when
// they were last signed and when they expire, and whether the key is
// revoked.
type NodeCredential struct {
	Node string `json:"node"`
	Key  string `json:"key"`
	// Token is the id of the enrolment token the key was presented with.
	Token    string    `json:"token"`
	Enrolled time.Time `json:"enrolled"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
	Revoked  time.Time `json:"revoked,omitzero"`
}

// tokenUse is a token's record in the TokensBucket: created when it is
// redeemed, so a second redemption finds it.
type tokenUse struct {
	Node string    `json:"node"`
	Key  string    `json:"key"`
	Used time.Time `json:"used"`
}

// tokensRefused is a node's other record in the TokensBucket: the tokens
// made for it until Before are refused, because it was revoked or removed
// then. A token is redeemable for an hour by default, and an operator who
// ends a node's access means the tokens already handed out too.
type tokensRefused struct {
	Node   string    `json:"node"`
	Before time.Time `json:"before"`
	Why    string    `json:"why"` // "revoked" or "removed"
}

// tokenKey and nodeKey are the keys of the buckets; refusedKey is a
// node's tokensRefused in the TokensBucket (a token's id is hex, so it is
// never "refused").
func tokenKey(mesh, id string) string     { return mesh + "." + id }
func nodeKey(mesh, node string) string    { return mesh + "." + node }
func refusedKey(mesh, node string) string { return mesh + ".refused." + node }

// enrol answers one Enrol: a host presenting its token with the public
// half of the key it made. The reasons it refuses are told to the host
// and logged, and nothing is issued then.
func (s *Service) enrol(ctx context.Context, b *store.Handles, m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, strings.TrimSuffix(linkproto.AllEnrols(s.Mesh), "*"))
	// The answer goes only where the token's bootstrap user listens: the
	// service may publish anywhere, so a reply subject chosen freely
	// would make it a confused deputy (see replyToInbox).
	if !strings.HasPrefix(m.Reply, linkproto.EnrolledPrefix(s.Mesh, id)+".") {
		s.Log.Warn("enrolment refused", "token", id, "reason", fmt.Sprintf("reply subject %q is not under %s", m.Reply, linkproto.EnrolledPrefix(s.Mesh, id)))
		return
	}
	var req linkproto.Enrol
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &req); err != nil {
		s.Log.Warn("enrolment refused", "token", id, "reason", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	node, answer, err := s.redeem(ctx, b, id, req)
	if err != nil {
		s.Log.Warn("enrolment refused", "token", id, "node", node, "reason", err)
		answer = linkproto.Credential{Node: node, Refused: err.Error()}
	} else {
		s.Log.Info("node enrolled", "node", node, "token", id, "key", req.Key, "expires", answer.Expires)
	}
	answer.Protocol, answer.Nonce = linkproto.ProtocolVersion, req.Nonce
	if err := answer.Sign(s.Key, s.Mesh); err != nil {
		s.Log.Error("cannot answer an enrolment", "node", node, "err", err)
		return
	}
	if err := m.Respond(linkproto.Marshal(answer)); err != nil {
		s.Log.Error("cannot answer an enrolment", "node", node, "err", err)
	}
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
	if _, err := b.Tokens.Create(ctx, tokenKey(s.Mesh, t.ID), mustJSON(use)); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return node, linkproto.Credential{}, fmt.Errorf("record the token's use: %w", err)
		}
		var prev tokenUse
		if e, gerr := b.Tokens.Get(ctx, tokenKey(s.Mesh, t.ID)); gerr == nil {
			_ = json.Unmarshal(e.Value(), &prev)
		}
		return node, linkproto.Credential{}, fmt.Errorf("%w: it was used at %s to enrol %s; ask for a new one with `meshctl enrol %s`",
			ErrTokenUsed, prev.Used.Format(time.RFC3339), prev.Node, t.Node)
	}
	// The token is spent from here on, whatever happens next: a failure
	// below gives it back, so the host can try again.
	giveBack := func() { _ = b.Tokens.Delete(context.WithoutCancel(ctx), tokenKey(s.Mesh, t.ID)) }
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
	rec := NodeCredential{Node: t.Node, Key: req.Key, Token: t.ID, Enrolled: now.UTC(), Issued: now.UTC(), Expires: expires.UTC()}
	if _, err := b.Nodes.Put(ctx, nodeKey(s.Mesh, t.Node), mustJSON(rec)); err != nil {
		giveBack()
		return node, linkproto.Credential{}, fmt.Errorf("record the node's credential: %w", err)
	}
	// The key the node's secrets are sealed to, told with the token that
	// proves the node: nothing else may set it.
	if _, err := b.SealKeys.Put(ctx, linkproto.DesiredKey(s.Mesh, t.Node), []byte(req.SealKey)); err != nil {
		giveBack()
		return node, linkproto.Credential{}, fmt.Errorf("record the node's sealing key: %w", err)
	}
	return node, linkproto.Credential{Node: t.Node, JWT: token, Expires: expires.UTC()}, nil
}

// tokenRefused is why t may not be redeemed: it was made before its node
// was last revoked or removed. A record that cannot be read refuses too.
func tokenRefused(ctx context.Context, tokens jetstream.KeyValue, mesh string, t linkproto.Token) error {
	e, err := tokens.Get(ctx, refusedKey(mesh, t.Node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read whether the tokens of %s are refused: %w", t.Node, err)
	}
	var r tokensRefused
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return fmt.Errorf("%w: the record refusing the tokens of %s does not read: %v", ErrTokenRefused, t.Node, err)
	}
	issued := t.IssuedAt()
	if issued.After(r.Before) {
		return nil
	}
	return fmt.Errorf("%w: it was made at %s, and %s was %s at %s, ending every token made until then; ask for a new one with `meshctl enrol %s`",
		ErrTokenRefused, issued.Format(time.RFC3339), t.Node, r.Why, r.Before.Format(time.RFC3339), t.Node)
}

// refuseTokens refuses every token made for node until now: it is being
// revoked or removed (why).
func (c *Client) refuseTokens(ctx context.Context, node, why string) error {
	kv, err := c.store.KV(ctx, linkproto.TokensBucket)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, refusedKey(c.Mesh, node), mustJSON(tokensRefused{Node: node, Before: c.Now().UTC(), Why: why})); err != nil {
		return fmt.Errorf("refuse the tokens made for %s: %w", node, err)
	}
	return nil
}

// renew answers one Renew: the node's credentials signed again, for the
// key on record, unless that key is revoked. Like a hello, the answer goes
// only into the node's own inbox.
func (s *Service) renew(ctx context.Context, b *store.Handles, m *nats.Msg) {
	mesh, node, err := linkproto.NodeOf(m.Subject)
	if err != nil || mesh != s.Mesh {
		s.Log.Warn("renewal on an unexpected subject", "subject", m.Subject, "err", err)
		return
	}
	var req linkproto.Renew
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &req); err != nil || req.Node != node {
		s.Log.Warn("malformed renewal", "node", node, "err", err, "names", req.Node)
		return
	}
	if err := replyToInbox(m, mesh, node); err != nil {
		s.Log.Warn("malformed renewal", "node", node, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	answer, err := s.renewed(ctx, b, node, req.Key)
	if err != nil {
		s.Log.Warn("renewal refused", "node", node, "reason", err)
		answer = linkproto.Credential{Node: node, Refused: err.Error()}
	} else {
		s.Log.Info("credentials renewed", "node", node, "expires", answer.Expires)
	}
	answer.Protocol, answer.Nonce = linkproto.ProtocolVersion, req.Nonce
	if err := answer.Sign(s.Key, s.Mesh); err != nil {
		s.Log.Error("cannot answer a renewal", "node", node, "err", err)
		return
	}
	if err := m.Respond(linkproto.Marshal(answer)); err != nil {
		s.Log.Error("cannot answer a renewal", "node", node, "err", err)
	}
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
	if _, err := b.Nodes.Update(ctx, nodeKey(s.Mesh, node), mustJSON(rec), rev); err != nil {
		return linkproto.Credential{}, fmt.Errorf("record the renewal: %w", err)
	}
	return linkproto.Credential{Node: node, JWT: token, Expires: expires.UTC()}, nil
}

// nodeCredential reads node's record and its revision; nil for none.
func (s *Service) nodeCredential(ctx context.Context, b *store.Handles, node string) (*NodeCredential, uint64, error) {
	return readNodeCredential(ctx, b.Nodes, s.Mesh, node)
}

func readNodeCredential(ctx context.Context, kv jetstream.KeyValue, mesh, node string) (*NodeCredential, uint64, error) {
	e, err := kv.Get(ctx, nodeKey(mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("the credential of %s: %w", node, err)
	}
	var rec NodeCredential
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("the credential of %s: %w", node, err)
	}
	return &rec, e.Revision(), nil
}

func (s *Service) credentialTTL() time.Duration {
	if s.CredentialTTL > 0 {
		return s.CredentialTTL
	}
	return DefaultCredentialTTL
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
		panic("control: does not encode: " + err.Error())
	}
	return b
}

// keyRevoker revokes node keys: what Client.Revoke needs of Accounts.
type keyRevoker interface {
	Revoke(ctx context.Context, keys ...string) error
}

// Revoke ends node's access at once: every enrolment token made for it
// until now is refused (one not yet redeemed would let it back), its
// record is marked revoked (so no control service renews it), then its
// key is revoked in the mesh account the broker enforces, which closes
// its connection and refuses it from then on. Revoking a revoked node
// pushes the revocation again. A node that never enrolled has no record
// (ErrNoRecord), and its tokens are refused all the same.
func (c *Client) Revoke(ctx context.Context, node string, r keyRevoker) (*NodeCredential, error) {
	return c.revoke(ctx, node, r, "revoked")
}

func (c *Client) revoke(ctx context.Context, node string, r keyRevoker, why string) (*NodeCredential, error) {
	if err := linkproto.ValidName(node); err != nil {
		return nil, err
	}
	if err := c.refuseTokens(ctx, node, why); err != nil {
		return nil, err
	}
	kv, err := c.store.KV(ctx, linkproto.NodesBucket)
	if err != nil {
		return nil, err
	}
	rec, rev, err := readNodeCredential(ctx, kv, c.Mesh, node)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: %s has no credential on record: it never enrolled with a token of this mesh (any token made for it until now is refused)", ErrNoRecord, node)
	}
	if rec.Revoked.IsZero() {
		rec.Revoked = c.Now().UTC()
		if _, err := kv.Update(ctx, nodeKey(c.Mesh, node), mustJSON(rec), rev); err != nil {
			return nil, fmt.Errorf("mark %s revoked: %w", node, err)
		}
	}
	if err := r.Revoke(ctx, rec.Key); err != nil {
		return rec, err
	}
	return rec, nil
}

// credentials reads every node's record; none when the bucket is not
// there yet (a control service older than credentials).
func (c *Client) credentials(ctx context.Context) (map[string]NodeCredential, error) {
	out := map[string]NodeCredential{}
	kv, err := c.store.KV(ctx, linkproto.NodesBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the nodes bucket: %w", err)
	}
	err = decodeEntries(ctx, kv, nodeKey(c.Mesh, "*"), jsonEntry[NodeCredential]("the credential"), func(rec NodeCredential) { out[rec.Node] = rec })
	if err != nil {
		return nil, fmt.Errorf("list the credentials: %w", err)
	}
	return out, nil
}
