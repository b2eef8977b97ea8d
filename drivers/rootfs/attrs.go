package rootfs

import (
	"fmt"

	"github.com/mesh-host/mesh-host/drivers"
)

// Attrs are the mode and ownership a file or directory should have, with
// the owner and group names resolved to ids.
type Attrs struct {
	Mode     drivers.Mode
	UID, GID int
}

// Attrs resolves what a spec asks of a path: its mode (def when the spec
// gives none), and its owner and group by name in the root's own
// etc/passwd and etc/group.
func (r *Root) Attrs(mode *drivers.Mode, def drivers.Mode, owner, group string) (Attrs, error) {
	uid, err := r.LookupUser(owner)
	if err != nil {
		return Attrs{}, fmt.Errorf("owner: %w", err)
	}
	gid, err := r.LookupGroup(group)
	if err != nil {
		return Attrs{}, fmt.Errorf("group: %w", err)
	}
	return Attrs{Mode: drivers.ModeOr(mode, def), UID: uid, GID: gid}, nil
}

// Differs names each respect in which what was found differs from a:
// "mode", "owner", "group", as an Observation reports them.
func (a Attrs) Differs(mode drivers.Mode, uid, gid int) []string {
	var out []string
	if mode != a.Mode {
		out = append(out, "mode")
	}
	if uid != a.UID {
		out = append(out, "owner")
	}
	if gid != a.GID {
		out = append(out, "group")
	}
	return out
}
