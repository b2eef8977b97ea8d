package main

import (
	"fmt"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/projector"
)

// numberLocal gives d, read from a file that left its revision out, the
// host's own next one after its desired declaration in s: that
// declaration's revision when d holds the same (nothing new), the next
// when it differs, 1 when it has none. It returns what to tell the
// operator, "" for a d that states its revision (checked as before). A
// file kept beside the host need not follow the numbers the mesh or
// earlier applies used.
func numberLocal(d *declaration.Declaration, s projector.State) (string, error) {
	if d.Revision != 0 {
		return "", nil
	}
	if s.Desired == nil || s.Desired.Revision == 0 {
		d.Revision = 1
		return "revision 1 assigned (none desired)", nil
	}
	// A declaration's digest is that of its JSON, revision included.
	d.Revision = s.Desired.Revision
	doc, err := d.MarshalJSON()
	if err != nil {
		return "", err
	}
	if journal.FormatSum(journal.SumOf(doc)) == s.Desired.Digest {
		return fmt.Sprintf("revision %d is desired with the same content: nothing new", d.Revision), nil
	}
	d.Revision = s.Desired.Revision + 1
	return fmt.Sprintf("revision %d assigned (desired was %d)", d.Revision, s.Desired.Revision), nil
}
