package exec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// account is who a command runs as: a user of the root's own etc/passwd,
// the group it runs with, and its supplementary groups.
type account struct {
	name     string
	uid, gid uint32
	// groups are the supplementary groups: the group it runs with and
	// every group of the root's etc/group that lists the user, as
	// initgroups(3) and systemd's User= give them. Nothing of the host's
	// own groups is kept.
	groups []uint32
	// home is the home directory as passwd states it, beneath the root;
	// shell the login shell, /bin/sh when passwd names none.
	home, shell string
}

// lookupAccount resolves user (default root) and group (default the
// user's primary group) in the root's etc/passwd and etc/group. root
// needs no passwd: it is uid 0 everywhere. Root.LookupUser gives the id
// alone; a command needs the home and the groups too, so the entries are
// read here (Root.EachAccountEntry).
func lookupAccount(root *rootfs.Root, user, group string) (account, error) {
	if user == "" {
		user = "root"
	}
	a, err := findUser(root, user)
	if err != nil {
		return account{}, err
	}
	if group != "" {
		gid, err := root.LookupGroup(group)
		if err != nil {
			return account{}, err
		}
		a.gid = uint32(gid)
	}
	a.groups, err = memberOf(root, a.name, a.gid)
	if err != nil {
		return account{}, err
	}
	return a, nil
}

func findUser(root *rootfs.Root, name string) (account, error) {
	var f []string
	err := root.EachAccountEntry("/etc/passwd", func(fields []string) bool {
		if len(fields) >= 7 && fields[0] == name {
			f = fields
			return false
		}
		return true
	})
	switch {
	case errors.Is(err, fs.ErrNotExist) && name == "root", err == nil && f == nil && name == "root":
		return account{name: "root", home: "/root", shell: "/bin/sh"}, nil
	case err != nil:
		return account{}, fmt.Errorf("%w: user %q: cannot read /etc/passwd in the root: %v", drivers.ErrInvalidSpec, name, err)
	case f == nil:
		return account{}, fmt.Errorf("%w: user %q: not found in the root's /etc/passwd", drivers.ErrInvalidSpec, name)
	}
	uid, err1 := strconv.ParseUint(f[2], 10, 32)
	gid, err2 := strconv.ParseUint(f[3], 10, 32)
	if err1 != nil || err2 != nil {
		return account{}, fmt.Errorf("%w: user %q: /etc/passwd in the root gives it ids %q:%q", drivers.ErrInvalidSpec, name, f[2], f[3])
	}
	a := account{name: name, uid: uint32(uid), gid: uint32(gid), home: f[5], shell: f[6]}
	if a.home == "" {
		a.home = "/"
	}
	if a.shell == "" {
		a.shell = "/bin/sh"
	}
	return a, nil
}

// memberOf is gid and every group of the root's etc/group that lists
// user among its members.
func memberOf(root *rootfs.Root, user string, gid uint32) ([]uint32, error) {
	groups := []uint32{gid}
	err := root.EachAccountEntry("/etc/group", func(f []string) bool {
		if len(f) < 4 || !slices.Contains(strings.Split(f[3], ","), user) {
			return true
		}
		// A broken line names no group the user could be given.
		if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
			groups = append(groups, uint32(id))
		}
		return true
	})
	if errors.Is(err, fs.ErrNotExist) {
		return groups, nil
	}
	if err != nil {
		return nil, fmt.Errorf("user %q: read /etc/group in the root: %w", user, err)
	}
	slices.Sort(groups)
	return slices.Compact(groups), nil
}

// asHost checks that a host not running as root, in tests and demos,
// is asked for nothing but itself: it cannot change user or groups, and
// runs every command as it runs.
func (a account) asHost(user, group string) error {
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		return nil
	}
	if user != "" && int(a.uid) != uid || group != "" && int(a.gid) != gid {
		return fmt.Errorf("the host runs as uid %d, not root: it can run a command only as itself, not as user %q group %q", uid, user, group)
	}
	return nil
}
