package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Desired is the desired-state bucket of one mesh: an entry a node, key
// linkproto.DesiredKey, value the signed push that declare stored (a
// linkproto.Declaration). It is the one reader and writer of that record:
// whatever pushes, renders, plans, lists or reverts a node's declaration
// asks it.
type Desired struct {
	kv   jetstream.KeyValue
	mesh string
}

// Entry is node's entry as read: its value, the bucket's revision of it,
// the push it holds, and the declaration in the push's document.
type Entry struct {
	Value    []byte
	Revision uint64
	Push     *linkproto.Declaration
	decl     *declaration.Declaration
}

// Declaration is the declaration e holds, nil for no entry.
func (e *Entry) Declaration() *declaration.Declaration {
	if e == nil {
		return nil
	}
	return e.decl
}

// Check says how much of an entry a read checks.
type Check int

const (
	// Full decodes the envelope strictly (its protocol version, its
	// size) and checks that the document's own head (mesh, node,
	// revision) agrees with it: wherever a declaration is pushed, stored
	// over or decoded.
	Full Check = iota
	// EnvelopeOnly reads the envelope in one pass and leaves the document
	// as it is, without the head check: for listings of every node's
	// revision, where at 10,000 nodes the full check's three passes over
	// every document were the listing's largest cost
	// (BenchmarkNodes10000). The envelope's mesh and node are checked.
	EnvelopeOnly
)

// Push is node's stored push, checked in full; nil when there is none.
func (d *Desired) Push(ctx context.Context, node string) (*linkproto.Declaration, error) {
	e, err := d.kv.Get(ctx, linkproto.DesiredKey(d.mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the desired state of %s: %w", node, err)
	}
	return d.decode(e.Value(), node, Full)
}

// Get is node's entry with its declaration decoded; nil when there is
// none.
func (d *Desired) Get(ctx context.Context, node string) (*Entry, error) {
	e, err := d.kv.Get(ctx, linkproto.DesiredKey(d.mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the desired state of %s: %w", node, err)
	}
	return d.entry(e.Value(), e.Revision(), node)
}

// Revision is the revision stored for node, read from the envelope
// alone (as Listed with EnvelopeOnly); ok is false when there is none.
func (d *Desired) Revision(ctx context.Context, node string) (revision uint64, ok bool, err error) {
	e, err := d.kv.Get(ctx, linkproto.DesiredKey(d.mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the desired state of %s: %w", node, err)
	}
	push, err := d.decode(e.Value(), node, EnvelopeOnly)
	if err != nil {
		return 0, false, err
	}
	return push.Revision, true, nil
}

// Exists says whether node has an entry.
func (d *Desired) Exists(ctx context.Context, node string) (bool, error) {
	_, err := d.kv.Get(ctx, linkproto.DesiredKey(d.mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// History is every declaration stored for node that the bucket still
// keeps, oldest first, and how many entries it keeps (removals
// included).
func (d *Desired) History(ctx context.Context, node string) ([]*declaration.Declaration, int, error) {
	hist, err := d.kv.History(ctx, linkproto.DesiredKey(d.mesh, node))
	if err != nil {
		return nil, 0, err
	}
	var out []*declaration.Declaration
	for _, e := range hist {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		entry, err := d.entry(e.Value(), e.Revision(), node)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, entry.decl)
	}
	return out, len(hist), nil
}

// Create stores push as node's first entry; it fails with
// jetstream.ErrKeyExists when node has one.
func (d *Desired) Create(ctx context.Context, node string, push *linkproto.Declaration) error {
	if err := push.For(d.mesh, node); err != nil {
		return fmt.Errorf("store %s's declaration: %w", node, err)
	}
	_, err := d.kv.Create(ctx, linkproto.DesiredKey(d.mesh, node), linkproto.Marshal(push))
	return err
}

// Update stores push over node's entry read at revision; it fails with
// jetstream.ErrKeyExists when the entry changed since.
func (d *Desired) Update(ctx context.Context, node string, push *linkproto.Declaration, revision uint64) error {
	// A declaration is numbered before it is stored (a file may leave its
	// revision out; whoever stores it numbers it): never one without.
	if err := push.For(d.mesh, node); err != nil {
		return fmt.Errorf("store %s's declaration: %w", node, err)
	}
	_, err := d.kv.Update(ctx, linkproto.DesiredKey(d.mesh, node), linkproto.Marshal(push), revision)
	return err
}

// Purge removes node's entry and its history.
func (d *Desired) Purge(ctx context.Context, node string) error {
	return d.kv.Purge(ctx, linkproto.DesiredKey(d.mesh, node))
}

// Each hands put every entry of the mesh as it is now, without removed
// ones, for Listed to read: a listing decodes them where it likes (many
// at once).
func (d *Desired) Each(ctx context.Context, put func(jetstream.KeyValueEntry)) error {
	return EachEntry(ctx, d.kv, linkproto.DesiredKey(d.mesh, "*"), put)
}

// Listed reads an entry Each handed out: the node its key names ("" for a key
// of no node of the mesh) and its push, read as check says.
func (d *Desired) Listed(e jetstream.KeyValueEntry, check Check) (string, *linkproto.Declaration, error) {
	node, ok := strings.CutPrefix(e.Key(), d.mesh+".")
	if !ok {
		return "", nil, nil
	}
	push, err := d.decode(e.Value(), node, check)
	return node, push, err
}

// entry decodes value, the entry of node at revision, in full.
func (d *Desired) entry(value []byte, revision uint64, node string) (*Entry, error) {
	push, err := d.decode(value, node, Full)
	if err != nil {
		return nil, err
	}
	decl, err := declaration.DecodeStored(push.Document)
	if err != nil {
		return nil, fmt.Errorf("the stored desired state of %s does not decode: %w", node, err)
	}
	return &Entry{Value: value, Revision: revision, Push: push, decl: decl}, nil
}

// head is the part of a stored declaration document read without parsing
// the whole.
type head struct {
	Mesh     string `json:"mesh"`
	Node     string `json:"node"`
	Revision uint64 `json:"revision"`
}

// decode reads an entry's value as node's push, checked as check says.
func (d *Desired) decode(value []byte, node string, check Check) (*linkproto.Declaration, error) {
	return decodeDesired(value, d.mesh, node, check)
}

func decodeDesired(value []byte, mesh, node string, check Check) (*linkproto.Declaration, error) {
	wrap := func(err error) error { return fmt.Errorf("the stored desired state of %s: %w", node, err) }
	if len(value) > linkproto.MaxDeclarationSize {
		return nil, wrap(fmt.Errorf("%w: %d bytes, the limit is %d", linkproto.ErrTooLarge, len(value), linkproto.MaxDeclarationSize))
	}
	var p linkproto.Declaration
	switch check {
	case EnvelopeOnly:
		if err := json.Unmarshal(value, &p); err != nil {
			return nil, wrap(err)
		}
	default:
		var probe struct {
			Document json.RawMessage `json:"document"`
		}
		if err := json.Unmarshal(value, &probe); err != nil {
			return nil, wrap(err)
		}
		if len(probe.Document) > 0 {
			if err := linkproto.Decode(value, linkproto.MaxDeclarationSize, &p); err != nil {
				return nil, wrap(err)
			}
		}
	}
	if len(p.Document) == 0 {
		u, err := unsigned(value)
		if err != nil {
			return nil, wrap(err)
		}
		p = *u
	} else if check == Full || p.Mesh == "" {
		var h head
		if err := json.Unmarshal(p.Document, &h); err != nil {
			return nil, wrap(err)
		}
		if p.Mesh == "" {
			// An envelope that names no node is its document's.
			p.Mesh, p.Node, p.Revision = h.Mesh, h.Node, h.Revision
		}
		if h.Mesh != p.Mesh || h.Node != p.Node || h.Revision != p.Revision {
			return nil, wrap(fmt.Errorf("its document is revision %d for %s/%s, its envelope revision %d for %s/%s", h.Revision, h.Mesh, h.Node, p.Revision, p.Mesh, p.Node))
		}
	}
	if err := p.For(mesh, node); err != nil {
		return nil, wrap(err)
	}
	return &p, nil
}

// unsigned reads an entry stored before declarations were signed: the
// bare document, written by control planes of protocol version 1. It is
// returned as an unsigned push, which nodes of version 2 and later
// refuse until it is declared again. This is the only reader of that
// form; it can be deleted once the protocol is past version 3, by when
// every such entry has been declared again or its node removed.
func unsigned(value []byte) (*linkproto.Declaration, error) {
	var h head
	if err := json.Unmarshal(value, &h); err != nil {
		return nil, err
	}
	return &linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: h.Mesh, Node: h.Node, Revision: h.Revision, Document: value}, nil
}
