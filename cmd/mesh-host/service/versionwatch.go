package service

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"

	"github.com/mesh-host/mesh-host/upgrade"
)

// watchVersions asks the reconcile loop for a look (between reconciles)
// whenever an arrival marker appears in a directory of dir: a version
// delivered by something other than a reconcile of this host (a package
// upgrade, the tarball's install.sh) is then noticed at once rather than
// at the next drift reconcile. It watches dir and each directory in it,
// since a marker is written inside a version directory after the directory
// is in place. It never ends the service: when it cannot watch, it says so
// and the drift reconciles still look.
func watchVersions(ctx context.Context, dir string, look chan<- struct{}, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("cannot watch the versions directory; new versions are seen after a reconcile", "dir", dir, "err", err)
		<-ctx.Done()
		return nil
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		log.Warn("cannot watch the versions directory; new versions are seen after a reconcile", "dir", dir, "err", err)
		<-ctx.Done()
		return nil
	}
	vs, _ := upgrade.List(dir)
	for _, v := range vs {
		_ = w.Add(v.Dir) // its marker rewritten: the archive driver re-delivered it
	}
	ask := func() {
		select {
		case look <- struct{}{}:
		default: // a look is due already
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			switch {
			case filepath.Dir(ev.Name) == filepath.Clean(dir):
				// A directory renamed into place: watch it for its marker
				// (adding a file fails harmlessly), and look once, for a
				// marker written before the watch was. Dot names are
				// staging directories, renamed later: a watch on one
				// would be dropped by the rename, taking the watch of the
				// same directory under its final name with it.
				if ev.Has(fsnotify.Create) && !strings.HasPrefix(filepath.Base(ev.Name), ".") {
					_ = w.Add(ev.Name)
					ask()
				}
			case filepath.Base(ev.Name) == upgrade.ArrivedFile && (ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write)):
				ask()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("watching the versions directory", "err", err)
			ask() // events may have been lost
		}
	}
}
