package service

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/mesh-host/mesh-host/journal/event"
)

// tightenDirs makes each of dirs (the state directory, the socket's) a
// directory of this user's that nobody else may enter: created 0700 when
// missing, and made 0700 when found open to others. What it tightened is
// returned as records to journal. A directory owned by another user is
// refused: whoever owns it can swap what is in it.
func tightenDirs(dirs ...string) ([]event.Record, error) {
	var recs []event.Record
	seen := map[string]bool{}
	for _, dir := range dirs {
		dir = filepath.Clean(dir)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a directory", dir)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			return nil, fmt.Errorf("%s is owned by uid %d, not by uid %d that runs the service: whoever owns it can replace what is in it; run `chown %d %s`", dir, st.Uid, os.Geteuid(), os.Geteuid(), dir)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			if err := os.Chmod(dir, 0o700); err != nil {
				return nil, fmt.Errorf("make %s 0700: %w", dir, err)
			}
			recs = append(recs, event.New(event.DirTightened, 0, "", event.DirTightenedPayload{Path: dir, Was: fmt.Sprintf("%04o", uint32(perm))}))
		}
	}
	return recs, nil
}
