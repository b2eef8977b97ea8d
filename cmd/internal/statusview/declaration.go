package statusview

import (
	"fmt"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/projector"
)

// maxShown bounds a source or a name from the state as shown here: a
// report comes from the node, and a line is for reading.
const maxShown = 256

// inForce says which declaration is in force and where it came from: the
// mesh (who declared it, signed), a file applied on the machine, or a
// local override that sets the mesh's aside. false when none is.
func inForce(s projector.State) (string, bool) {
	if l := s.Local; l != nil {
		by := ""
		if l.User != "" {
			by = " by " + clip(l.User)
		}
		aside := "the mesh had declared nothing"
		if l.MeshRevision != 0 {
			aside = fmt.Sprintf("the mesh's revision %d is set aside", l.MeshRevision)
		}
		return fmt.Sprintf("revision %d, a LOCAL OVERRIDE from %s%s since %s (#%d); %s (reclaim: meshctl declare NODE FILE --reclaim)",
			l.Revision, clip(l.Source), by, l.At.Format(journalview.TimeLayout), l.Seq, aside), true
	}
	d := s.Desired
	if d == nil {
		return "", false
	}
	if strings.HasPrefix(d.Source, "file:") {
		return fmt.Sprintf("revision %d from %s, applied on the machine", d.Revision, clip(d.Source)), true
	}
	by := ""
	if d.Operator != "" {
		by = ", declared by " + clip(d.Operator)
	}
	how := "signed"
	switch {
	case d.Signature == "": // journaled before declarations were signed
		how = "not signed"
	case d.Reclaim:
		how = "signed as a reclaim"
	}
	return fmt.Sprintf("revision %d from the mesh%s (%s)", d.Revision, by, how), true
}

// clip cuts s to maxShown bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxShown {
		return s
	}
	cut := maxShown
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
