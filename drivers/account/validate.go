package account

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
)

// nameRE is a name as Debian's useradd and groupadd accept one: lower
// case, a letter or "_" first, a "$" only at the end (Samba machine
// accounts). Anything else could be read as a NIS line ("+", "-"), a
// comment ("#"), a number where an id is expected, or an option.
var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]*[$]?$`)

// maxNameLen is the longest name useradd accepts.
const maxNameLen = 32

// maxID is the largest id accepted: ids are signed 32-bit in too many
// programs for one above 2^31-2 to be safe, and 2^31-1 is an error
// marker in some.
const maxID = 1<<31 - 2

// checkName refuses a name useradd would refuse.
func checkName(what, name string) error {
	if len(name) > maxNameLen || !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s name %q is not one useradd accepts: lower case letters, digits, \"_\" and \"-\", starting with a letter or \"_\", an optional \"$\" at the end, at most %d characters",
			drivers.ErrInvalidSpec, what, name, maxNameLen)
	}
	return nil
}

// checkID refuses an id outside 0..2^31-2, and 65535: it is (uid_t)-1 of
// the 16-bit ids older interfaces and filesystems use, which means "no
// change" to chown(2) there, so a file could never be given to it.
func checkID(what string, id int) error {
	switch {
	case id < 0 || id > maxID:
		return fmt.Errorf("%w: %s %d is outside 0..%d", drivers.ErrInvalidSpec, what, id, maxID)
	case id == 65535:
		return fmt.Errorf("%w: %s 65535 is -1 to 16-bit interfaces (\"no change\" to chown); choose another", drivers.ErrInvalidSpec, what)
	}
	return nil
}

// checkField refuses what would break a line of the files: a colon
// (the separator), a newline or any other control character.
func checkField(what, v string) error {
	if strings.ContainsRune(v, ':') {
		return fmt.Errorf("%w: %s %q contains \":\", the files' field separator", drivers.ErrInvalidSpec, what, v)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %s %q contains a control character (a newline would end the line)", drivers.ErrInvalidSpec, what, v)
		}
	}
	return nil
}

// checkAbs refuses a home or shell that is not an absolute, clean path.
func checkAbs(what, p string) error {
	if err := checkField(what, p); err != nil {
		return err
	}
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p {
		return fmt.Errorf("%w: %s %q is not an absolute, clean path", drivers.ErrInvalidSpec, what, p)
	}
	return nil
}

// checkUser refuses a user spec the driver cannot apply; the password's
// value is checked once opened (passwordOf).
func checkUser(s *drivers.UserSpec) error {
	if err := checkName("user", s.Name); err != nil {
		return err
	}
	if s.UID != nil {
		if err := checkID("uid", *s.UID); err != nil {
			return err
		}
	} else if s.ChangeID {
		return fmt.Errorf("%w: change_id without a uid: there is no id to change to", drivers.ErrInvalidSpec)
	}
	if s.Group != "" {
		if err := checkName("primary group", s.Group); err != nil {
			return err
		}
	}
	for i, g := range s.Groups {
		if err := checkName("supplementary group", g); err != nil {
			return err
		}
		if slices.Contains(s.Groups[:i], g) {
			return fmt.Errorf("%w: supplementary group %q is listed twice", drivers.ErrInvalidSpec, g)
		}
	}
	if s.Home != "" {
		if err := checkAbs("home", s.Home); err != nil {
			return err
		}
	}
	if s.Shell != "" {
		if err := checkAbs("shell", s.Shell); err != nil {
			return err
		}
	}
	return checkField("comment", s.Comment)
}

// checkGroup refuses a group spec the driver cannot apply.
func checkGroup(s *drivers.GroupSpec) error {
	if err := checkName("group", s.Name); err != nil {
		return err
	}
	if s.GID != nil {
		return checkID("gid", *s.GID)
	}
	if s.ChangeID {
		return fmt.Errorf("%w: change_id without a gid: there is no id to change to", drivers.ErrInvalidSpec)
	}
	return nil
}
