package drivers

import (
	"fmt"
	"path"
	"strings"
)

// CheckPath refuses a path that is not absolute and clean, is the root
// itself, or has a ".." component.
func CheckPath(p string) error {
	switch {
	case p == "" || p[0] != '/':
		return fmt.Errorf("%w: %q is not absolute", ErrUnsafePath, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w: %q is not clean (want %q)", ErrUnsafePath, p, path.Clean(p))
	case p == "/":
		return fmt.Errorf("%w: the root itself is not a resource", ErrUnsafePath)
	case strings.Contains(p, "\x00"):
		return fmt.Errorf("%w: %q contains NUL", ErrUnsafePath, p)
	}
	for rest := p[1:]; rest != ""; {
		var c string
		c, rest, _ = strings.Cut(rest, "/")
		if c == ".." || c == "." {
			return fmt.Errorf("%w: %q has a %q component", ErrUnsafePath, p, c)
		}
	}
	return nil
}
