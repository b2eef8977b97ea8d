package upgrade

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ReadKnownGood returns the version named by STATE-DIR/known-good, "" when
// there is no record. A record that is not one valid name is an error
// wrapping ErrBadRecord (the launcher treats it as no record).
func ReadKnownGood(stateDir string) (string, error) {
	f, err := readFields(filepath.Join(stateDir, KnownGoodFile))
	if err != nil || f == nil {
		return "", err
	}
	if len(f) != 1 || !validName(f[0]) {
		return "", fmt.Errorf("%w: %s: %q is not a version name", ErrBadRecord, filepath.Join(stateDir, KnownGoodFile), strings.Join(f, " "))
	}
	return f[0], nil
}

// WriteKnownGood records name as the known-good version: STATE-DIR/known-good
// replaced whole (a temporary file, synced, renamed over it, the directory
// synced), so a crash leaves the old record or the new, never a torn one.
func WriteKnownGood(stateDir, name string) error {
	if !validName(name) {
		return fmt.Errorf("write known-good: %w: %q", ErrNotVersion, name)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("write known-good: %w", err)
	}
	return writeAtomic(filepath.Join(stateDir, KnownGoodFile), []byte(name+"\n"))
}

// Failures returns the launcher's count of consecutive failed starts and
// the version it counts for; "" and 0 when there is none.
func Failures(stateDir string) (version string, count int, err error) {
	path := filepath.Join(stateDir, LauncherDir, FailuresFile)
	f, err := readFields(path)
	if err != nil || f == nil {
		return "", 0, err
	}
	if len(f) == 2 {
		if n, err := strconv.Atoi(f[1]); err == nil && n >= 0 && validName(f[0]) {
			return f[0], n, nil
		}
	}
	return "", 0, fmt.Errorf("%w: %s: %q", ErrBadRecord, path, strings.Join(f, " "))
}

// ClearFailures removes the launcher's failure count: the host calls it
// once its start has completed a reconcile, which makes the start a
// success whatever happens later. Removing no count is not an error.
func ClearFailures(stateDir string) error {
	err := os.Remove(filepath.Join(stateDir, LauncherDir, FailuresFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Bad returns the version the launcher rolled back from and that version's
// last exit code; "" when there is none. The launcher starts the
// known-good version instead of it while it is the newest, and forgets it
// when a newer one arrives.
func Bad(stateDir string) (version string, exitCode int, err error) {
	path := filepath.Join(stateDir, LauncherDir, BadFile)
	f, err := readFields(path)
	if err != nil || f == nil {
		return "", 0, err
	}
	if len(f) == 2 && validName(f[0]) {
		if n, err := strconv.Atoi(f[1]); err == nil {
			return f[0], n, nil
		}
	}
	return "", 0, fmt.Errorf("%w: %s: %q", ErrBadRecord, path, strings.Join(f, " "))
}

// Decision is one line of the launcher's decision file.
type Decision struct {
	// Verb is what was decided: VerbRolledBack.
	Verb string
	// From is the version given up, To the one started instead.
	From, To string
	// ExitCode is From's last exit code.
	ExitCode int
	// Reason is the rest of the line, in the launcher's words.
	Reason string
}

// Decisions reads the launcher's decision file: none when there is no file.
// Lines that do not parse are left out and reported in err (wrapping
// ErrBadRecord) beside the ones that do.
func Decisions(stateDir string) ([]Decision, error) {
	path := filepath.Join(stateDir, LauncherDir, DecisionFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read launcher decisions: %w", err)
	}
	var out []Decision
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		d, ok := parseDecision(line)
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %s line %d: %q", ErrBadRecord, path, n, line))
			continue
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("read launcher decisions: %w", err))
	}
	return out, errors.Join(errs...)
}

func parseDecision(line string) (Decision, bool) {
	f := strings.SplitN(line, " ", 5)
	if len(f) < 4 || (f[0] != VerbRolledBack && f[0] != VerbHalted) || !validName(f[1]) || !validName(f[2]) {
		return Decision{}, false
	}
	code, err := strconv.Atoi(f[3])
	if err != nil {
		return Decision{}, false
	}
	d := Decision{Verb: f[0], From: f[1], To: f[2], ExitCode: code}
	if len(f) == 5 {
		d.Reason = strings.TrimSpace(f[4])
	}
	return d, true
}

// RemoveDecisions removes the launcher's decision file, once its lines are
// journaled. Removing none is not an error.
func RemoveDecisions(stateDir string) error {
	err := os.Remove(filepath.Join(stateDir, LauncherDir, DecisionFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// readFields returns the space-separated fields of the first line of path;
// nil and no error when there is no file.
func readFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if f == nil {
		f = []string{}
	}
	return f, nil
}

// writeAtomic replaces path with data: a temporary file beside it, synced,
// renamed over it, and the directory synced so the rename is durable.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
