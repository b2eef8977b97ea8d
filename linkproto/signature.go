package linkproto

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"
)

// Signatures. The control plane signs what a node obeys with the mesh's
// declaration key (an ed25519 nkey); the node learnt its public half at
// enrolment and trusts nothing else. The broker carries the signed bytes
// and cannot change them: it can delay or drop a declaration, never forge
// one. Each signed message signs its own context string, so a signature
// over one kind of message never verifies as another.
const (
	// declarationContext starts the bytes a Declaration's signature covers.
	declarationContext = "mesh-host declaration 1"
	// planContext starts the bytes a PlanRequest's signature covers: the
	// same fields as a declaration's, so a plan request signed can never
	// be replayed as a push, nor a push as a plan request.
	planContext = "mesh-host plan 1"
	// welcomeContext and syncedContext start the bytes of a Welcome's and
	// a Synced's: how much of its journal the stream holds, which the node
	// acts on (it stops resending what the answer says is held).
	welcomeContext = "mesh-host welcome 1"
	syncedContext  = "mesh-host synced 1"
	// credentialContext starts the bytes of a Credential's: the node's
	// credentials, or the refusal to give them.
	credentialContext = "mesh-host credential 1"
)

// MaxOperatorLen bounds the name of the operator a declaration carries.
const MaxOperatorLen = 128

// Errors of verification. Each names what a node refuses.
var (
	// ErrUnsigned is returned for a message with no signature.
	ErrUnsigned = errors.New("unsigned")
	// ErrUntrustedSigner is returned for a message signed by a key other
	// than the mesh's.
	ErrUntrustedSigner = errors.New("signed by a key this node does not trust")
	// ErrBadSignature is returned for a signature that does not verify:
	// the message was changed after it was signed, or the signature is
	// not one.
	ErrBadSignature = errors.New("bad signature")
)

// NewSigningKey makes a mesh's declaration key.
func NewSigningKey() (nkeys.KeyPair, error) {
	return nkeys.CreatePair(nkeys.PrefixByteServer)
}

// ValidSigningKey reports whether pub is the public half of a declaration
// key.
func ValidSigningKey(pub string) error {
	if !nkeys.IsValidPublicServerKey(pub) {
		return fmt.Errorf("%q is not a mesh signing key (a public nkey starting with N)", pub)
	}
	return nil
}

// ValidOperator reports whether s can name the operator who made a
// declaration: not empty, at most MaxOperatorLen bytes of printable text.
func ValidOperator(s string) error {
	if s == "" {
		return errors.New("operator: required (who made the declaration)")
	}
	return printable("operator", s, MaxOperatorLen)
}

// signedBytes is the unambiguous encoding of context and fields: each
// field is preceded by its length, so no two lists of fields encode alike.
func signedBytes(context string, fields ...[]byte) []byte {
	n := len(context) + 1
	for _, f := range fields {
		n += binary.MaxVarintLen64 + len(f)
	}
	b := make([]byte, 0, n)
	b = append(b, context...)
	b = append(b, 0)
	for _, f := range fields {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

func sign(key nkeys.KeyPair, data []byte) (signer, signature string, err error) {
	pub, err := key.PublicKey()
	if err != nil {
		return "", "", err
	}
	sig, err := key.Sign(data)
	if err != nil {
		return "", "", err
	}
	return pub, base64.RawURLEncoding.EncodeToString(sig), nil
}

// verify checks signature by signer over data, and that signer is trusted.
func verify(what, trusted, signer, signature string, data []byte) error {
	switch {
	case signature == "" && signer == "":
		return fmt.Errorf("%w: the %s carries no signature", ErrUnsigned, what)
	case signer != trusted:
		return fmt.Errorf("%w: the %s is signed by %s; this node trusts %s", ErrUntrustedSigner, what, short(signer), short(trusted))
	}
	sig, err := base64.RawURLEncoding.DecodeString(signature)
	if err != nil {
		return fmt.Errorf("%w: the %s's signature does not decode: %v", ErrBadSignature, what, err)
	}
	kp, err := nkeys.FromPublicKey(trusted)
	if err != nil {
		return fmt.Errorf("the trusted key: %w", err)
	}
	if err := kp.Verify(data, sig); err != nil {
		return fmt.Errorf("%w: the %s was changed after it was signed, or not signed by %s", ErrBadSignature, what, short(trusted))
	}
	return nil
}

// short names a key in a message: enough to tell two apart.
func short(key string) string {
	if key == "" {
		return "no key"
	}
	if len(key) > 12 {
		return key[:12] + "…"
	}
	return key
}

// reclaimField is the field a reclaim's signature covers after the
// document. A declaration that is no reclaim has no such field, so every
// signature made before reclaims existed still verifies, and one made
// without it never verifies as a reclaim.
const reclaimField = "reclaim"

// signedBytes is what d's signature covers: mesh, node, revision, the
// operator and the document exactly as it travels, and, for a reclaim,
// that it is one.
func (d *Declaration) signedBytes() []byte {
	fields := [][]byte{[]byte(d.Mesh), []byte(d.Node),
		[]byte(strconv.FormatUint(d.Revision, 10)), []byte(d.Operator), d.Document}
	if d.Reclaim {
		fields = append(fields, []byte(reclaimField))
	}
	return signedBytes(declarationContext, fields...)
}

// Sign signs d with key, the mesh's declaration key.
func (d *Declaration) Sign(key nkeys.KeyPair) error {
	var err error
	d.Signer, d.Signature, err = sign(key, d.signedBytes())
	return err
}

// Verify checks that d is signed by trusted, the mesh's declaration key,
// and unchanged since. It says nothing about whom d is for: For does.
func (d *Declaration) Verify(trusted string) error {
	return verify("declaration", trusted, d.Signer, d.Signature, d.signedBytes())
}

// VerifyStored checks a declaration a node journaled: its fields as the
// record keeps them. It is Verify for a declaration no longer in its
// message.
func VerifyStored(trusted, mesh, node string, revision uint64, operator string, document []byte, signer, signature string) error {
	return VerifyStoredReclaim(trusted, mesh, node, revision, operator, document, signer, signature, false)
}

// VerifyStoredReclaim is VerifyStored for a declaration journaled with
// its reclaim flag.
func VerifyStoredReclaim(trusted, mesh, node string, revision uint64, operator string, document []byte, signer, signature string, reclaim bool) error {
	d := Declaration{Mesh: mesh, Node: node, Revision: revision, Operator: operator, Document: document, Signer: signer, Signature: signature, Reclaim: reclaim}
	return d.Verify(trusted)
}

// signedBytes is what p's signature covers: a declaration's fields under
// the plan's own context.
func (p *PlanRequest) signedBytes() []byte {
	return signedBytes(planContext, []byte(p.Mesh), []byte(p.Node),
		[]byte(strconv.FormatUint(p.Revision, 10)), []byte(p.Operator), p.Document)
}

// Sign signs p with key, the mesh's declaration key.
func (p *PlanRequest) Sign(key nkeys.KeyPair) error {
	var err error
	p.Signer, p.Signature, err = sign(key, p.signedBytes())
	return err
}

// Verify checks that p is signed by trusted for planning, and unchanged
// since. A push's signature does not verify here.
func (p *PlanRequest) Verify(trusted string) error {
	return verify("plan request", trusted, p.Signer, p.Signature, p.signedBytes())
}

func (w *Welcome) signedBytes(mesh, node string) []byte {
	decl := ""
	if w.Declaration != nil {
		decl = w.Declaration.Signature
	}
	return signedBytes(welcomeContext, []byte(mesh), []byte(node), []byte(w.Nonce),
		[]byte(strconv.FormatUint(w.EventsThrough, 10)), []byte(decl))
}

// Sign signs w, the answer to node's hello, with key.
func (w *Welcome) Sign(key nkeys.KeyPair, mesh, node string) error {
	var err error
	w.Signer, w.Signature, err = sign(key, w.signedBytes(mesh, node))
	return err
}

// Verify checks that w answers node's hello that carried nonce, signed by
// trusted. A welcome that answers another hello is a replay.
func (w *Welcome) Verify(trusted, mesh, node, nonce string) error {
	if err := verify("welcome", trusted, w.Signer, w.Signature, w.signedBytes(mesh, node)); err != nil {
		return err
	}
	if w.Nonce != nonce {
		return fmt.Errorf("%w: the welcome answers another hello", ErrBadSignature)
	}
	return nil
}

func (s *Synced) signedBytes(mesh, node string) []byte {
	return signedBytes(syncedContext, []byte(mesh), []byte(node), []byte(s.Nonce),
		[]byte(strconv.FormatUint(s.EventsThrough, 10)))
}

// Sign signs s, the answer to node's sync, with key.
func (s *Synced) Sign(key nkeys.KeyPair, mesh, node string) error {
	var err error
	s.Signer, s.Signature, err = sign(key, s.signedBytes(mesh, node))
	return err
}

// Verify checks that s answers node's sync that carried nonce, signed by
// trusted.
func (s *Synced) Verify(trusted, mesh, node, nonce string) error {
	if err := verify("synced", trusted, s.Signer, s.Signature, s.signedBytes(mesh, node)); err != nil {
		return err
	}
	if s.Nonce != nonce {
		return fmt.Errorf("%w: the synced answers another sync", ErrBadSignature)
	}
	return nil
}

func (c *Credential) signedBytes(mesh string) []byte {
	expires := ""
	if !c.Expires.IsZero() {
		expires = c.Expires.UTC().Format(time.RFC3339Nano)
	}
	return signedBytes(credentialContext, []byte(mesh), []byte(c.Node), []byte(c.Nonce),
		[]byte(c.JWT), []byte(expires), []byte(c.Refused))
}

// Sign signs c, the answer to an enrolment or renewal in mesh, with key.
func (c *Credential) Sign(key nkeys.KeyPair, mesh string) error {
	var err error
	c.Signer, c.Signature, err = sign(key, c.signedBytes(mesh))
	return err
}

// Verify checks that c answers node's request that carried nonce, signed
// by trusted.
func (c *Credential) Verify(trusted, mesh, node, nonce string) error {
	if err := verify("credential", trusted, c.Signer, c.Signature, c.signedBytes(mesh)); err != nil {
		return err
	}
	switch {
	case c.Nonce != nonce:
		return fmt.Errorf("%w: the credential answers another request", ErrBadSignature)
	case c.Node != node:
		return fmt.Errorf("%w: the credential is for node %s, not %s", ErrWrongNode, c.Node, node)
	}
	return nil
}

// NewNonce returns a fresh nonce for a hello, a sync, an enrolment or a
// renewal.
func NewNonce() string {
	return base64.RawURLEncoding.EncodeToString(randomBytes(16))
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("linkproto: no randomness: " + err.Error())
	}
	return b
}

// Prepared is kp with its public key and its ed25519 private key derived
// once. An nkey keeps only its seed and derives both at every call: three
// scalar multiplications a signature, where a rollout signs a declaration
// a node and the control service a sync answer each time a node sends
// its records. Signatures are the same bytes kp makes.
func Prepared(kp nkeys.KeyPair) (nkeys.KeyPair, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed() // the nkey's own: not to be wiped here
	if err != nil {
		return nil, err
	}
	_, raw, err := nkeys.DecodeSeed(seed) // a copy
	if err != nil {
		return nil, err
	}
	defer clear(raw)
	return &preparedKey{KeyPair: kp, pub: pub, priv: ed25519.NewKeyFromSeed(raw)}, nil
}

type preparedKey struct {
	nkeys.KeyPair
	pub  string
	priv ed25519.PrivateKey
}

func (k *preparedKey) PublicKey() (string, error) { return k.pub, nil }

func (k *preparedKey) Sign(input []byte) ([]byte, error) { return ed25519.Sign(k.priv, input), nil }

func (k *preparedKey) Wipe() {
	clear(k.priv)
	k.KeyPair.Wipe()
}
