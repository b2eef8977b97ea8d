package linkproto

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// LocalReport is a local override as a heartbeat carries it.
type LocalReport struct {
	// Revision is the local declaration's, MeshRevision the mesh's one
	// it set aside (0 for none).
	Revision     uint64 `json:"revision"`
	MeshRevision uint64 `json:"mesh_revision,omitempty"`
	// Source is where it came from ("file:PATH"), User who applied it.
	Source string    `json:"source"`
	User   string    `json:"user,omitempty"`
	Since  time.Time `json:"since,omitzero"`
}

// MaxLocalSourceLen and MaxLocalUserLen bound what a node may say of its
// local override: a path and a login name, shown on the operator's
// terminal.
const (
	MaxLocalSourceLen = 4096 + len("file:")
	MaxLocalUserLen   = 64
)

// Check refuses a local override a node reports that no host would
// make: a source or user too long, not UTF-8 or not printable.
func (l *LocalReport) Check() error {
	if err := printable("source", l.Source, MaxLocalSourceLen); err != nil {
		return err
	}
	return printable("user", l.User, MaxLocalUserLen)
}

// ValidLocalUser reports whether s can name the user who applied a local
// override: 1 to MaxLocalUserLen bytes of printable text without spaces.
func ValidLocalUser(s string) error {
	if s == "" {
		return errors.New("user: empty")
	}
	if strings.ContainsFunc(s, unicode.IsSpace) {
		return fmt.Errorf("user: %q holds a space", s)
	}
	return printable("user", s, MaxLocalUserLen)
}
