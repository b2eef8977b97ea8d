package client

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

// numbered is d as it is stored over read (node's entry as read; nil:
// none), with what to tell the operator once it is stored:
//
//   - a d that names no host release, over a stored declaration that
//     delivers one, keeps it: the host's version is the mesh's business
//     (meshctl release, a release rollout), not the file's, and a file the
//     operator keeps must not take back what the mesh delivered;
//   - a d that leaves its revision out (0) is numbered after the stored
//     one: the stored revision when the content is the same (nothing new:
//     pushed again), the next one when it differs, 1 over none. A release
//     or a rollout numbers the declarations it stores too, so a file that
//     states its revision would have to follow numbers it cannot know.
//
// The store is conditional on read, so two operators numbering the same
// next revision cannot both win.
func numbered(node string, d *declaration.Declaration, read *store.Entry) (_ *declaration.Declaration, notes []string, err error) {
	stored := read.Declaration()
	stated := d.Revision
	if stated == 0 {
		next := *d
		next.Revision = 1
		if stored != nil {
			next.Revision = stored.Revision + 1
		}
		d = &next
	}
	if kept := storedRelease(d, stored); kept != nil {
		if d, err = keepRelease(d, stored); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrDeclarationRefused, err)
		}
		notes = append(notes, fmt.Sprintf("%s: kept host release %s that the mesh delivered (the file names none; `meshctl release` changes it)",
			node, short(strings.TrimPrefix(kept.Digest, "sha256:"))))
	}
	if stated != 0 {
		return d, notes, nil
	}
	switch {
	case stored == nil:
		notes = append(notes, fmt.Sprintf("%s: revision %d assigned (none stored)", node, d.Revision))
	case sameAs(d, stored):
		same := *d
		same.Revision = stored.Revision
		d = &same
		notes = append(notes, fmt.Sprintf("%s: revision %d is stored with the same content: nothing new", node, d.Revision))
	default:
		notes = append(notes, fmt.Sprintf("%s: revision %d assigned (stored was %d)", node, d.Revision, stored.Revision))
	}
	return d, notes, nil
}

// storedRelease is the host release stored delivers when d names none,
// nil otherwise.
func storedRelease(d, stored *declaration.Declaration) *drivers.ArchiveSpec {
	if stored == nil || slices.ContainsFunc(d.Resources, isRelease) {
		return nil
	}
	if i := slices.IndexFunc(stored.Resources, isRelease); i >= 0 {
		return stored.Resources[i].(*drivers.ArchiveSpec)
	}
	return nil
}

// sameAs says d holds what stored holds, whatever their revisions: sealed
// anew, a secret differs in its bytes, not in what was declared.
func sameAs(d, stored *declaration.Declaration) bool {
	same := *d
	same.Revision = stored.Revision
	return withoutSealed(&same).Digest() == withoutSealed(stored).Digest()
}
