// Command sandbox is the demo, which testbeds/demo builds and runs: it
// brings up a single-machine mesh for a person to try. It builds both
// programs, starts the control service on its embedded broker,
// enrols one host that manages a sandbox root, starts it, pushes the
// example declaration, and says what to run next. Both services keep
// running in the background until `demo down`.
//
//	go run ./testbeds/demo            # up, in ./sandbox
//	go run ./testbeds/demo down       # stop both services
//	go run ./testbeds/demo reset      # stop them and remove ./sandbox
//
// Up, down and up again work in every state the README leads to: a node
// that keeps a newer declaration (a release raised its revision) keeps
// it, and an up that fails stops what it started.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/packaging"
	"github.com/mesh-host/mesh-host/testbeds"
	"github.com/mesh-host/mesh-host/upgrade"
)

const (
	mesh = "demo"    // as examples/sandbox.yaml says
	node = "sandbox" // as examples/sandbox.yaml says
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs the demo command and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("demo", flag.ContinueOnError)
	fl.SetOutput(stderr)
	dir := fl.String("dir", "sandbox", "Directory of everything the demo makes.")
	listen := fl.String("listen", "127.0.0.1:4222", "Where the embedded broker listens.")
	releases := fl.String("releases-listen", "127.0.0.1:4280", "Where meshctl serves host releases over HTTP.")
	decl := fl.String("declaration", "examples/sandbox.yaml", "The declaration to push.")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	d := &demo{dir: *dir, listen: *listen, releases: *releases, out: stdout}
	var err error
	switch cmd := fl.Arg(0); cmd {
	case "", "up":
		err = d.up(*decl)
	case "down":
		err = d.down()
	case "reset":
		err = d.reset()
	default:
		err = fmt.Errorf("unknown command %q: up, down or reset", cmd)
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}

type demo struct {
	dir      string
	listen   string // the broker's address
	releases string // the releases server's address
	out      io.Writer
	bins     testbeds.Binaries
}

func (d *demo) path(p ...string) string { return filepath.Join(append([]string{d.dir}, p...)...) }

func (d *demo) up(decl string) (err error) {
	if err := d.down(); err != nil {
		return err
	}
	// Every address is checked before minutes go into a build.
	for _, a := range []struct{ flag, addr string }{{"--listen", d.listen}, {"--releases-listen", d.releases}} {
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("%s is taken (%v): pass %s HOST:PORT", a.addr, err, a.flag)
		}
		l.Close()
	}
	for _, p := range []string{"bin", "logs", "root/etc", "control"} {
		if err := os.MkdirAll(d.path(p), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(d.path("control"), 0o700); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "building mesh-host and meshctl (the first build compiles every dependency: minutes on a small machine)...")
	bin, err := filepath.Abs(d.path("bin"))
	if err != nil {
		return err
	}
	version := "demo"
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(out))
	}
	start := time.Now()
	if d.bins, err = testbeds.BuildWithProgress(bin, version, d.out); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "built in %s\n", time.Since(start).Round(100*time.Millisecond))
	// An up that fails stops what it started: nothing is left running
	// that the next up would trip over.
	defer func() {
		if err != nil {
			fmt.Fprintln(d.out, "up failed; stopping what it started")
			if derr := d.down(); derr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, derr)
			}
		}
	}()

	if _, err := os.Stat(d.path("control", "control.json")); err != nil {
		if _, err := d.meshctl("init", "--mesh", mesh); err != nil {
			return err
		}
	}
	if err := d.background("meshctl", nil, d.bins.Meshctl, "--data", d.path("control"), "serve", "--listen", d.listen, "--releases-listen", d.releases); err != nil {
		return err
	}
	if err := wait(30*time.Second, func() error { _, err := d.meshctl("nodes"); return err }); err != nil {
		return fmt.Errorf("the control service did not come up (see %s): %v", d.path("logs", "meshctl.log"), err)
	}
	// The host is installed the way the tarball installs it, into the
	// sandbox root that stands for the machine, and runs under the
	// launcher the unit would run: the shipped binary becomes the first
	// version in ROOT/opt/mesh-host/versions.
	installed, err := d.install()
	if err != nil {
		return err
	}
	token, err := d.meshctl("enrol", node)
	if err != nil {
		return err
	}
	enrol := exec.Command(d.bins.MeshHost, "--state-dir", d.path("state"), "enrol", "--force", "-")
	enrol.Stdin = strings.NewReader(token)
	if out, err := enrol.CombinedOutput(); err != nil {
		return fmt.Errorf("mesh-host enrol: %v\n%s", err, out)
	}
	root, err := filepath.Abs(d.path("root"))
	if err != nil {
		return err
	}
	state, err := filepath.Abs(d.path("state"))
	if err != nil {
		return err
	}
	env := []string{"MESH_HOST_VERSIONS=" + filepath.Join(root, upgrade.DefaultVersionsDir), "MESH_HOST_STATE_DIR=" + state}
	if err := d.background("mesh-host", env, "sh", filepath.Join(root, launcherPath), "--root", root); err != nil {
		return err
	}
	if err := wait(30*time.Second, func() error {
		return exec.Command(d.bins.MeshHost, "--state-dir", d.path("state"), "status").Run()
	}); err != nil {
		return fmt.Errorf("mesh-host did not come up (see %s): %v", d.path("logs", "mesh-host.log"), err)
	}
	// The push waits for the node's link, which says so with a heartbeat
	// sent after this start: pushed earlier, the node would be "offline".
	started := time.Now()
	l, err := d.waitLinked(started)
	if err != nil {
		return err
	}
	d.sayRunning(installed, l)
	if err := d.declare(decl, l.stored); err != nil {
		return err
	}
	mc := fmt.Sprintf("%s --data %s", d.path("bin", "meshctl"), d.path("control"))
	mh := fmt.Sprintf("%s --root %s --state-dir %s", d.path("bin", "mesh-host"), d.path("root"), d.path("state"))
	fmt.Fprintf(d.out, `
The mesh is up: meshctl serve on an embedded broker at tls://%[1]s
(TLS only, with a certificate from the mesh's CA, %[10]s), and one host, %[2]q, installed from the tarball into %[3]s (the machine it
manages), running under the launcher from %[3]s/opt/mesh-host/versions,
holding %[3]s in the state %[4]s declares. Logs are in %[5]s. Try:

  %[6]s nodes
  %[6]s journal %[2]s --why file:/etc/motd
  %[7]s journal
  %[7]s status

Change a file under %[3]s by hand, then run "%[7]s check" (or wait for the
drift timer), and look at the journal again. Edit %[4]s, raise its revision,
and push it with "%[6]s declare %[2]s %[4]s".

Deliver the host's next version (it stands aside, the launcher starts the
new one, nodes shows it):

  go run ./packaging/build --version next --out %[8]s
  %[6]s release %[8]s/mesh-host-next-linux-*.release.tar.gz --nodes %[2]s

Stop both services with: go run ./testbeds/demo --dir %[9]s down
(up again resumes where it stopped; reset removes %[9]s to start afresh)
`, d.listen, node, d.path("root"), decl, d.path("logs"), mc, mh, d.path("dist"), d.dir, d.path("control", "ca.pem"))
	return nil
}

// linked is what the node said in its first heartbeat after a start.
type linked struct {
	stored         uint64 // the revision the control plane stores for it; 0 for none
	version, build string // the version it runs, and that version's label
}

// waitLinked waits until the node reports over its link with a heartbeat
// sent after since.
func (d *demo) waitLinked(since time.Time) (l linked, err error) {
	// Past one heartbeat interval (60 s): a host that is up has sent one
	// since, even when its link-up heartbeat came while the broker was
	// still restoring its streams on a loaded machine, and was lost.
	err = wait(75*time.Second, func() error {
		out, err := d.meshctl("nodes", "--json")
		if err != nil {
			return err
		}
		nodes, err := testbeds.JSONLines[struct {
			Node      string `json:"node"`
			Desired   uint64 `json:"desired"`
			Heartbeat *struct {
				Sent    time.Time `json:"sent"`
				Version string    `json:"version"`
				Build   string    `json:"build"`
			} `json:"heartbeat"`
		}](out)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Node == node && n.Heartbeat != nil && !n.Heartbeat.Sent.Before(since.Add(-time.Second)) {
				l = linked{n.Desired, n.Heartbeat.Version, n.Heartbeat.Build}
				return nil
			}
		}
		return fmt.Errorf("%s has not reported over its link since it started", node)
	})
	if err != nil {
		return linked{}, fmt.Errorf("%v (see %s)", err, d.path("logs", "mesh-host.log"))
	}
	return l, nil
}

// sayRunning says which version the node runs, as its heartbeat names it:
// after a release that is not the one just installed, and the line
// install.sh printed would otherwise be the last word on it.
func (d *demo) sayRunning(installed string, l linked) {
	short := func(v string) string { return v[:min(len(v), 12)] }
	running := short(l.version)
	if l.build != "" && l.build != l.version {
		running = l.build + " " + running
	}
	switch {
	case l.version == "":
		fmt.Fprintf(d.out, "%s has not said which version it runs\n", node)
	case l.version == installed:
		fmt.Fprintf(d.out, "%s runs mesh-host %s, the version just installed\n", node, running)
	default:
		fmt.Fprintf(d.out, "%s runs mesh-host %s, not the %s just installed: the launcher starts the newest version it holds (a release delivered it)\n",
			node, running, short(installed))
	}
}

// declare pushes the declaration file, unless the node keeps a stored
// declaration as new or newer: after a release (which raises the
// revision), or an up again, pushing the file's older revision would only
// be refused.
func (d *demo) declare(decl string, stored uint64) error {
	data, err := os.ReadFile(decl)
	if err != nil {
		return err
	}
	parsed, err := declaration.ParseYAML(decl, data)
	if err != nil {
		return err
	}
	if stored != 0 && stored >= parsed.Revision {
		fmt.Fprintf(d.out, "%s keeps its stored declaration, revision %d (%s is revision %d; raise it to push the file)\n",
			node, stored, decl, parsed.Revision)
		return nil
	}
	out, err := d.meshctl("declare", node, decl)
	fmt.Fprint(d.out, out)
	return err
}

// reset stops both services and removes the sandbox, for a fresh start:
// only a directory the demo made (it holds control/control.json, or
// nothing).
func (d *demo) reset() error {
	if err := d.down(); err != nil {
		return err
	}
	entries, err := os.ReadDir(d.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(d.path("control", "control.json")); err != nil && len(entries) > 0 {
		return fmt.Errorf("%s does not look like the demo's sandbox (no control/control.json): remove it yourself", d.dir)
	}
	fmt.Fprintf(d.out, "removing %s\n", d.dir)
	return os.RemoveAll(d.dir)
}

// launcherPath is where the tarball's install.sh puts the launcher, under
// its --prefix.
const launcherPath = "usr/lib/mesh-host/launcher"

// install lays out the tarball (the built binary, the launcher, the unit,
// the install scripts) in dist/ and runs its install.sh into the sandbox
// root, returning the version it installed. Run again with a changed
// binary, it adds that as a newer version, which the launcher then starts.
func (d *demo) install() (version string, err error) {
	dist := d.path("dist")
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return "", err
	}
	bin, err := os.ReadFile(d.bins.MeshHost)
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		"mesh-host": bin, "launcher": upgrade.Launcher, "arrive": packaging.Arrive,
		"install.sh": packaging.InstallScript, "mesh-host.service": packaging.Unit,
	} {
		if err := os.WriteFile(filepath.Join(dist, name), data, 0o755); err != nil {
			return "", err
		}
	}
	root, err := filepath.Abs(d.path("root"))
	if err != nil {
		return "", err
	}
	out, err := exec.Command("sh", filepath.Join(dist, "install.sh"), "--prefix", root).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("install.sh: %v\n%s", err, out)
	}
	line := firstLine(out)
	fmt.Fprintf(d.out, "%s", line)
	// "installed mesh-host version V in DIR"
	if f := strings.Fields(line); len(f) >= 4 && f[0] == "installed" {
		version = f[3]
	}
	return version, nil
}

func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i+1]
	}
	return s
}

// meshctl runs an operator command and returns its output.
func (d *demo) meshctl(args ...string) (string, error) {
	cmd := exec.Command(d.bins.Meshctl, append([]string{"--data", d.path("control")}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("meshctl %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

// background starts a service in its own session, so it outlives the demo
// command, with its output in logs/NAME.log and its pid in NAME.pid. The
// host's service is the launcher, told where the versions and the state
// are.
func (d *demo) background(name string, env []string, bin string, args ...string) error {
	log, err := os.OpenFile(d.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	return os.WriteFile(d.path(name+".pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// down stops what an earlier up started: the host first, so it does not
// spend its last moments reconnecting.
func (d *demo) down() error {
	for _, name := range []string{"mesh-host", "meshctl"} {
		b, err := os.ReadFile(d.path(name + ".pid"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("%s: %v", d.path(name+".pid"), err)
		}
		// A stale pid file may name a process that is no longer ours.
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte(name)) && syscall.Kill(pid, syscall.SIGTERM) == nil {
			fmt.Fprintf(d.out, "stopping %s (pid %d)\n", name, pid)
			if err := wait(90*time.Second, func() error {
				if alive(pid) {
					return fmt.Errorf("%s (pid %d) still runs", name, pid)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if err := os.Remove(d.path(name + ".pid")); err != nil {
			return err
		}
	}
	return nil
}

// alive reports whether pid runs: a process that exited but was not yet
// reaped by its parent (a zombie; the parent is up's caller when that is a
// test) does not.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2] != 'Z'
	}
	return true
}

// wait polls cond until it succeeds or timeout passes.
func wait(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
