package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// verifyDeclarations is `journal --verify`: it proves, from the journal
// alone, that every declaration the host took from its link was signed by
// the mesh's key (link.json's, or key when given), checking each record's
// signature over the document as it was journaled. A declaration applied
// from a file on the machine is listed as local: nothing signed it, and it
// did not come from the mesh. What compaction dropped is checked in the
// snapshot's desired state, which keeps the latest declaration's
// signature. It fails when any declaration from the link does not verify.
func verifyDeclarations(e *env, j *journal.Journal, key string) error {
	// Whom the declarations are for, when enrolled; else each document
	// says (see check).
	cfg, cfgErr := enrolment.Read(e.stateDir())
	if key == "" {
		if cfgErr != nil {
			return command.Refused("no key to verify with: %v (or give --key)", cfgErr)
		}
		key = cfg.SigningKey
	} else if err := linkproto.ValidSigningKey(key); err != nil {
		return command.Refused("--key: %v", err)
	}
	mesh, node := cfg.Mesh, cfg.Node

	var tally verifyTally
	w := e.stdout
	fmt.Fprintf(w, "verifying every declaration in %s against the mesh's key %s\n", j.Path(), key)

	// The snapshot's desired declaration stands for what was compacted away.
	snap, snapSeq, err := hostjournal.SnapshotState(j)
	if err != nil {
		return failed("%v", err)
	}
	if d := snap.Desired; d != nil && snapSeq > 0 {
		what := fmt.Sprintf("snapshot through #%d: revision %d", snapSeq, d.Revision)
		doc, err := hostjournal.Document(j, d.Document, d.DocumentSHA256)
		if err != nil {
			return failed("%s: %v", what, err)
		}
		tally.check(w, what, key, mesh, node, d.Revision, d.Source, d.Operator, doc, d.Signer, d.Signature, d.Reclaim)
	}
	err = j.ScanKind(event.DeclarationReceived, 1, func(r event.Record) error {
		var p event.DeclarationReceivedPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			tally.failed++
			fmt.Fprintf(w, "#%d: FAILED: the record does not decode: %v\n", r.Seq, err)
			return nil
		}
		what := fmt.Sprintf("#%d: revision %d", r.Seq, p.Revision)
		// A document stored apart is checked against its digest as it is
		// read: what is verified is the exact bytes the record names.
		doc, err := hostjournal.Document(j, p.Document, p.DocumentSHA256)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		tally.check(w, what, key, mesh, node, p.Revision, p.Source, p.Operator, doc, p.Signer, p.Signature, p.Reclaim)
		return nil
	})
	if err != nil {
		return failed("%v", err)
	}
	fmt.Fprintf(w, "%d from the mesh, verified; %d local; %d failed\n", tally.verified, tally.local, tally.failed)
	if tally.failed > 0 {
		return failed("%d declaration(s) in the journal are not proven to come from the mesh", tally.failed)
	}
	return nil
}

type verifyTally struct{ verified, local, failed int }

// check verifies one stored declaration and prints a line about it.
func (t *verifyTally) check(w io.Writer, what, key, mesh, node string, revision uint64, source, operator string, doc []byte, signer, signature string, reclaim bool) {
	if !strings.HasPrefix(source, "link:") {
		t.local++
		fmt.Fprintf(w, "%s: local (%s), not from the mesh: nothing signed it\n", what, source)
		return
	}
	if mesh == "" {
		// Not enrolled now: the document names whom it was for.
		var head struct{ Mesh, Node string }
		if err := json.Unmarshal(doc, &head); err == nil {
			mesh, node = head.Mesh, head.Node
		}
	}
	if err := linkproto.VerifyStoredReclaim(key, mesh, node, revision, operator, doc, signer, signature, reclaim); err != nil {
		t.failed++
		fmt.Fprintf(w, "%s: FAILED: %v\n", what, err)
		return
	}
	t.verified++
	if reclaim {
		fmt.Fprintf(w, "%s: signed by the mesh as a reclaim, declared by %q\n", what, operator)
		return
	}
	fmt.Fprintf(w, "%s: signed by the mesh, declared by %q\n", what, operator)
}
