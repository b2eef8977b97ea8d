package exec

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// DefaultTimeout bounds a run when the spec states no timeout; MaxTimeout
// is the longest a spec may state.
const (
	DefaultTimeout = 5 * time.Minute
	MaxTimeout     = 24 * time.Hour
)

// DefaultPath is the PATH a command runs with, and where a command named
// without a slash is looked up: the host's own, whatever PATH the host
// process was started with, so that a declaration means the same on
// every node.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxNameBytes bounds an exec's name, as the declaration bounds names.
const maxNameBytes = 255

// check refuses a spec the driver cannot run safely, whatever the
// declaration's parser let through: the driver trusts no caller with a
// command.
func check(s *drivers.ExecSpec) error {
	if err := checkName(s.Name); err != nil {
		return err
	}
	for _, a := range []struct {
		what string
		argv []string
	}{{"command", s.Command}, {"unless", s.Unless}, {"onlyif", s.OnlyIf}} {
		if a.what != "command" && a.argv == nil {
			continue
		}
		if err := checkArgv(a.argv); err != nil {
			return fmt.Errorf("%w: exec %s: %s: %v", drivers.ErrInvalidSpec, s.Name, a.what, err)
		}
	}
	if s.Creates == "" && s.Unless == nil && s.OnlyIf == nil && !s.RefreshOnly {
		return fmt.Errorf("%w: exec %s: an exec must be idempotent: give creates, unless, onlyif or refresh_only", drivers.ErrInvalidSpec, s.Name)
	}
	if s.Creates != "" {
		if err := drivers.CheckPath(s.Creates); err != nil {
			return fmt.Errorf("%w: exec %s: creates: %v", drivers.ErrInvalidSpec, s.Name, err)
		}
	}
	if s.Cwd != "" && s.Cwd != "/" {
		if err := drivers.CheckPath(s.Cwd); err != nil {
			return fmt.Errorf("%w: exec %s: cwd: %v", drivers.ErrInvalidSpec, s.Name, err)
		}
	}
	if _, err := timeout(s); err != nil {
		return err
	}
	if err := checkEnv(s.Env); err != nil {
		return fmt.Errorf("%w: exec %s: env: %v", drivers.ErrInvalidSpec, s.Name, err)
	}
	for _, c := range s.SuccessCodes {
		if c < 0 || c > 255 {
			return fmt.Errorf("%w: exec %s: success code %d is not an exit code (0 to 255)", drivers.ErrInvalidSpec, s.Name, c)
		}
	}
	return nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: exec has no name", drivers.ErrInvalidSpec)
	case len(name) > maxNameBytes:
		return fmt.Errorf("%w: exec name of %d bytes: at most %d", drivers.ErrInvalidSpec, len(name), maxNameBytes)
	case strings.Contains(name, "/"):
		return fmt.Errorf("%w: exec name %q has a /", drivers.ErrInvalidSpec, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: exec name %q has a control character", drivers.ErrInvalidSpec, name)
	}
	return nil
}

// checkArgv refuses an empty argv, a program named by a relative path
// (it would depend on the working directory), and NUL, which no argument
// can hold.
func checkArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("no program: the argv is empty")
	}
	for _, a := range argv {
		if strings.Contains(a, "\x00") {
			return fmt.Errorf("an argument contains NUL")
		}
	}
	if p := argv[0]; strings.Contains(p, "/") && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		return fmt.Errorf("program %q is neither an absolute, clean path nor a name to look up on PATH", p)
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// checkEnv refuses what is not NAME=value with a name a shell could
// read, a name given twice, and the names the host keeps: MESH_ROOT is
// the root prefix, and systemd-run's own SYSTEMD_LOG_ settings would
// change what the host reads of it.
func checkEnv(env []string) error {
	seen := map[string]bool{}
	for _, e := range env {
		name, value, ok := strings.Cut(e, "=")
		switch {
		case !ok || !envName.MatchString(name):
			return fmt.Errorf("%q is not NAME=value with a name of letters, digits and _", e)
		case strings.Contains(value, "\x00"):
			return fmt.Errorf("the value of %s contains NUL", name)
		case seen[name]:
			return fmt.Errorf("%s is given twice", name)
		case name == "MESH_ROOT", strings.HasPrefix(name, "SYSTEMD_LOG_"):
			return fmt.Errorf("%s is the host's to set", name)
		}
		seen[name] = true
	}
	return nil
}

func timeout(s *drivers.ExecSpec) (time.Duration, error) {
	if s.Timeout == "" {
		return DefaultTimeout, nil
	}
	d, err := time.ParseDuration(s.Timeout)
	if err != nil || d <= 0 || d > MaxTimeout {
		return 0, fmt.Errorf("%w: exec %s: timeout %q is not a duration above 0 and at most %s (\"30s\", \"5m\")", drivers.ErrInvalidSpec, s.Name, s.Timeout, MaxTimeout)
	}
	return d, nil
}

// job is a checked spec made ready to run: who runs it, where, with what
// environment and for how long.
type job struct {
	spec    *drivers.ExecSpec
	timeout time.Duration
	as      account
	// asSelf is set when the host does not run as root: the command
	// runs as the host does, with no change of user or groups.
	asSelf bool
	cwd    string // beneath the root
	env    []string
	path   string // the PATH of env, where programs are looked up
	codes  []int
	// redact is applied to all the driver shows of a command and what
	// it printed.
	redact func(string) string
}

// prepare checks s and resolves what running it needs from the root.
func (d *Driver) prepare(s *drivers.ExecSpec) (*job, error) {
	if err := check(s); err != nil {
		return nil, err
	}
	t, _ := timeout(s)
	as, err := lookupAccount(d.root, s.User, s.Group)
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", s.Name, err)
	}
	if err := as.asHost(s.User, s.Group); err != nil {
		return nil, fmt.Errorf("exec %s: %w", s.Name, err)
	}
	j := &job{spec: s, timeout: t, as: as, cwd: s.Cwd, codes: s.SuccessCodes, redact: d.redact}
	j.asSelf = !runningAsRoot()
	if j.cwd == "" {
		j.cwd = "/"
	}
	if len(j.codes) == 0 {
		j.codes = []int{0}
	}
	j.env = environment(d.root, as, s.Env)
	j.path = DefaultPath
	for _, e := range j.env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			j.path = v
		}
	}
	return j, nil
}

// environment is what a command sees: nothing of the host's own, only
// PATH, the user's HOME (beneath the root, as cwd is), USER, LOGNAME and
// SHELL as a login would set them, LANG=C.UTF-8 (messages in the C
// locale, the same on every node, yet UTF-8 where a tool prints a name),
// MESH_ROOT, the root prefix, and then the spec's env, which may replace
// any of them but MESH_ROOT.
func environment(root *rootfs.Root, as account, extra []string) []string {
	env := []string{
		"PATH=" + DefaultPath,
		"HOME=" + root.Host(as.home),
		"USER=" + as.name,
		"LOGNAME=" + as.name,
		"SHELL=" + as.shell,
		"LANG=C.UTF-8",
		"MESH_ROOT=" + root.Dir(),
	}
	for _, e := range extra {
		name, _, _ := strings.Cut(e, "=")
		env = slices.DeleteFunc(env, func(b string) bool { return strings.HasPrefix(b, name+"=") })
		env = append(env, e)
	}
	return env
}

// success reports whether code is one of the job's success codes.
func (j *job) success(code int) bool { return code >= 0 && slices.Contains(j.codes, code) }
