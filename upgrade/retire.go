package upgrade

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// retirable returns the versions of vs (as List orders them) that Retire
// would remove: every version that arrived before the predecessor and
// before the running version. The running version, the predecessor and
// anything newer than the running version are never among them. When
// predecessor is not among vs ("" included) or did not arrive before
// running, the newest version older than running stands in for it. ok is false when running is not among vs:
// nothing can be placed, so nothing is retirable.
func retirable(vs []Version, running, predecessor string) (retire []Version, pred Version, ok bool) {
	var run Version
	for _, v := range vs {
		switch v.Name {
		case running:
			run, ok = v, true
		case predecessor:
			pred = v
		}
	}
	if !ok {
		return nil, Version{}, false
	}
	if pred.Name == "" || pred.Counter >= run.Counter { // not on disk, or not before running
		pred = Version{}
		for _, v := range vs { // oldest first: the last one older than running
			if v.Name != run.Name && v.Counter < run.Counter {
				pred = v
			}
		}
	}
	if pred.Name == "" {
		return nil, Version{}, true // nothing older than running
	}
	for _, v := range vs {
		if v.Name != run.Name && v.Name != pred.Name && v.Counter < pred.Counter && v.Counter < run.Counter {
			retire = append(retire, v)
		}
	}
	return retire, pred, true
}

// Retire removes from dir every version that arrived before predecessor
// (see retirable), and returns what it removed, oldest first. Each is
// first renamed to RetiringPrefix+NAME, which is no version, so a crash
// mid-removal leaves nothing that looks runnable; then removed through an
// os.Root, which never follows a symlink out of dir. A version that cannot
// be removed is reported in err beside the ones that were.
func Retire(dir, running, predecessor string) (removed []Version, err error) {
	vs, err := List(dir)
	if err != nil {
		return nil, err
	}
	retire, _, ok := retirable(vs, running, predecessor)
	if !ok {
		return nil, fmt.Errorf("retire: running version %s: %w", running, ErrNotVersion)
	}
	if len(retire) == 0 {
		return nil, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("retire: %w", err)
	}
	defer root.Close()
	var errs []error
	for _, v := range retire {
		aside := RetiringPrefix + v.Name
		if err := root.RemoveAll(aside); err != nil { // a leftover of an earlier try
			errs = append(errs, fmt.Errorf("retire %s: %w", v.Name, err))
			continue
		}
		if err := root.Rename(v.Name, aside); err != nil {
			errs = append(errs, fmt.Errorf("retire %s: %w", v.Name, err))
			continue
		}
		if err := root.RemoveAll(aside); err != nil {
			// Renamed, so no longer a version; Sweep finishes the job.
			errs = append(errs, fmt.Errorf("retire %s: %w", v.Name, err))
		}
		removed = append(removed, v)
	}
	if len(removed) > 0 {
		if err := syncDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// Sweep removes what an interrupted Retire left in dir (RetiringPrefix
// directories) and returns the names of the versions they were. A missing
// dir is not an error.
func Sweep(dir string) (names []string, err error) {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep versions: %w", err)
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("sweep versions: %w", err)
	}
	all, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("sweep versions: %w", err)
	}
	var errs []error
	for _, n := range all {
		name, ok := strings.CutPrefix(n, RetiringPrefix)
		if !ok {
			continue
		}
		if err := root.RemoveAll(n); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", n, err))
			continue
		}
		names = append(names, name)
	}
	return names, errors.Join(errs...)
}
