package exec

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	osexec "os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
)

// scope is the transient scope unit a run is given where a service
// manager runs. systemd-run --scope asks the manager for the scope with
// its own pid in it, waits until it is made, and only then becomes the
// command (execve), so that nothing the command starts can be outside
// it: a daemon that calls setsid and forks twice is still in the scope's
// control group, and killing the scope kills it.
type scope struct {
	unit string // mesh-exec-NAME-RANDOM.scope
	run  string // systemd-run's path
	args []string
}

// killWithin bounds the systemctl that kills a scope: it runs after the
// run's own context has ended.
const killWithin = 30 * time.Second

// newScope prepares a run's scope. Its unit is named after the exec, with
// a random part of its own: two runs of one exec (a guard, then the
// command) never share one.
func (d *Driver) newScope(ctx context.Context, j *job) (*scope, error) {
	run, err := osexec.LookPath("systemd-run")
	if err != nil {
		return nil, fmt.Errorf("%w: a service manager runs, but systemd-run is not on PATH", drivers.ErrToolMissing)
	}
	version, err := d.systemdVersion(ctx)
	if err != nil {
		return nil, err
	}
	var random [6]byte
	rand.Read(random[:])
	sc := &scope{unit: "mesh-exec-" + unitPart(j.spec.Name) + "-" + hex.EncodeToString(random[:]) + ".scope", run: run}
	sc.args = []string{
		"systemd-run", "--scope", "--collect", "--unit=" + sc.unit,
		"--description=mesh-host exec " + j.spec.Name,
	}
	if version >= 244 {
		// The manager ends the scope itself if the host, which kills it
		// at its timeout, died meanwhile.
		sc.args = append(sc.args, fmt.Sprintf("--property=RuntimeMaxSec=%dms", (j.timeout+time.Minute).Milliseconds()))
	}
	if version >= 254 {
		// From 254 systemd-run expands $NAME in a scope's command line,
		// as a service's ExecStart does: an argv is passed as it is.
		sc.args = append(sc.args, "--expand-environment=no")
	}
	if !j.asSelf && j.as.uid != 0 {
		// systemd-run sets HOME, SHELL, USER and LOGNAME from the
		// machine's user database for --uid; the job's own values are
		// set again over them, so that a command sees the same
		// environment with a manager or without. (Only these travel on
		// systemd-run's command line; the rest of the environment is
		// handed over as the command's.)
		sc.args = append(sc.args, "--uid="+strconv.FormatUint(uint64(j.as.uid), 10))
		for _, name := range []string{"HOME", "SHELL", "USER", "LOGNAME"} {
			sc.args = append(sc.args, "--setenv="+name+"="+lookupEnv(j.env, name))
		}
	}
	if !j.asSelf && j.spec.Group != "" {
		sc.args = append(sc.args, "--gid="+strconv.FormatUint(uint64(j.as.gid), 10))
	}
	return sc, nil
}

// wrap returns the path and argv that run the program prog with argv in
// the scope.
func (sc *scope) wrap(prog string, argv []string) (string, []string) {
	return sc.run, append(append(append([]string(nil), sc.args...), "--", prog), argv[1:]...)
}

// started reports whether systemd-run made the scope and became the
// command, and drops what it said then from the output. Right before it
// becomes the command it says that it runs as the scope's unit (on
// stderr, which is the output's pipe: before anything the command
// says); a systemd-run that failed says why instead, and exits 1 like
// any command might, so its words are the only way to tell the two
// apart. A run with no scope started.
func (sc *scope) started(out *capture) bool {
	if sc == nil {
		return true
	}
	head := out.head[:min(len(out.head), 4096)]
	for i := 0; i < len(head); {
		end := bytes.IndexByte(head[i:], '\n')
		if end < 0 {
			return false
		}
		if bytes.Contains(head[i:i+end], []byte(sc.unit)) {
			out.skip(i + end + 1)
			return true
		}
		i += end + 1
	}
	return false
}

// kill kills every process of the scope with SIGKILL; the manager then
// finds it empty and, since it is --collect, forgets it. A scope that is
// gone already (its processes all ended, or it was never made) is not an
// error.
func (sc *scope) kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), killWithin)
	defer cancel()
	out, err := drivers.RunTool(ctx, nil, "systemctl", "kill", "--signal=SIGKILL", "--", sc.unit)
	if err != nil {
		return fmt.Errorf("kill scope %s: %w", sc.unit, err)
	}
	if out.Code != 0 && !gone(out.Message()) {
		return fmt.Errorf("kill scope %s: %s: %s", sc.unit, out.Status, out.Message())
	}
	return nil
}

// gone reports whether systemctl said there was nothing to kill.
func gone(msg string) bool {
	for _, s := range []string{"not loaded", "No such process", "No matching processes", "not found"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// with says what a killed run was killed with.
func (sc *scope) with() string {
	if sc == nil {
		return "with its process group"
	}
	return "with its scope " + sc.unit
}

// systemdVersion is the version of the machine's systemd-run, asked once.
func (d *Driver) systemdVersion(ctx context.Context) (int, error) {
	d.versionMu.Lock()
	defer d.versionMu.Unlock()
	if d.systemd > 0 {
		return d.systemd, nil
	}
	out, err := drivers.RunTool(ctx, nil, "systemd-run", "--version")
	if err != nil {
		return 0, err
	}
	// "systemd 252 (252.39-1~deb12u2)"
	f := strings.Fields(out.Stdout)
	v := 0
	if len(f) >= 2 && f[0] == "systemd" {
		v, _ = strconv.Atoi(f[1])
	}
	if out.Code != 0 || v <= 0 {
		return 0, fmt.Errorf("systemd-run --version: %s: %q is not \"systemd VERSION ...\"", out.Status, lastOf(out.Stdout, 200))
	}
	d.systemd = v
	return v, nil
}

// unitPart is name as a part of a unit name: letters, digits, _ and -,
// anything else _, and at most 64 bytes.
func unitPart(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 64)])
}

func lookupEnv(env []string, name string) string {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, name+"="); ok {
			return v
		}
	}
	return ""
}
