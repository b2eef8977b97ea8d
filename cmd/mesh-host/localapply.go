package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// enrolment says whether this host is enrolled in a mesh (its state
// directory holds a link.json) and, when link.json reads, which node it
// is. A link.json that does not read still counts: a host that might be
// the mesh's is not one a file is applied to without a word.
func (e *env) enrolment() (node string, enrolled bool) {
	dir := e.stateDir()
	if _, err := os.Lstat(filepath.Join(dir, enrolment.LinkConfigFile)); errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if cfg, err := enrolment.Read(dir); err == nil {
		return cfg.Node, true
	}
	return "", true
}

// orNode names the node in a command to run, NODE when not known.
func orNode(node string) string {
	if node == "" {
		return "NODE"
	}
	return node
}

// errOutsideMesh refuses a plain `apply` on an enrolled host: the
// declaration would step outside the mesh, and the mesh would be locked
// out of the node by a revision it never made.
func errOutsideMesh(node, file string) error {
	return fmt.Errorf("this host is enrolled in a mesh (node %s): applying %s here would step outside the mesh.\n"+
		"Pass --local to mean it: the host then holds it as a LOCAL OVERRIDE, shown to the mesh, and refuses the mesh's\n"+
		"declarations until the mesh takes the node back with `meshctl declare %s FILE --reclaim`",
		orNode(node), file, orNode(node))
}

// localUser is who runs this command, as it is journaled with a local
// override: the user sudo was run by, else the login's, else the uid's
// name, else "uid N". Only what passes linkproto.ValidLocalUser is taken.
func localUser(getenv func(string) string, uid int) string {
	for _, k := range []string{"SUDO_USER", "USER", "LOGNAME"} {
		if v := getenv(k); v != "" && linkproto.ValidLocalUser(v) == nil {
			return v
		}
	}
	return uidName(uint32(uid))
}

// uidName is uid's name in the password database, or "uid N".
func uidName(uid uint32) string {
	id := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(id); err == nil && linkproto.ValidLocalUser(u.Username) == nil {
		return u.Username
	}
	return "uid " + id
}

// overrideUser is the user a local override is journaled as. Inside the
// service the kernel's word on the client (SO_PEERCRED) comes first: a
// client other than root is its uid. Root is who it says it is (the
// forwarded --local-user, its SUDO_USER): it could write the journal
// anyway. Outside it, this process's own environment says.
func (e *env) overrideUser(claimed string) string {
	if e.held == nil {
		return localUser(os.Getenv, os.Getuid())
	}
	uid, known := localsock.PeerUID(e.ctx)
	if known && uid != 0 {
		return uidName(uid)
	}
	if linkproto.ValidLocalUser(claimed) == nil {
		return claimed
	}
	if known {
		return uidName(uid)
	}
	return "unknown"
}

// admitLocal admits d as a local override over s: ordered against an
// override already in force, never against the mesh's revision (the
// mesh's numbers are not the file's), and checked as every declaration
// is otherwise. It returns how it is journaled.
func (e *env) admitLocal(d *declaration.Declaration, s projector.State, user string) (hostjournal.As, error) {
	as := hostjournal.As{Local: true, User: user, Received: s.Local == nil}
	if l := s.Local; l != nil {
		if d.Revision < l.Revision {
			return as, fmt.Errorf("revision %d is older than revision %d, the local override in force (#%d): an old declaration never replays over a new one",
				d.Revision, l.Revision, l.Seq)
		}
		as.MeshRevision, as.MeshSignature = l.MeshRevision, l.MeshSignature
	} else if m := s.Desired; m != nil && m.Signature != "" {
		as.MeshRevision, as.MeshSignature = m.Revision, m.Signature
	}
	return as, e.admitContent(d)
}
