package systemd_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds"
	"github.com/mesh-host/mesh-host/testbeds/systemd"
)

// webDeclaration is the web server as an operator declares it: a user to
// run it, its document root owned by that user, the package installed by
// the host (with no start of its own, policy-rc.d, so that it never
// listens on the package's port 80 of this machine, whose network the
// container shares), its configuration, which reloads it when it changes,
// and the unit held running. extra are more resources.
func webDeclaration(port int, page string, extra ...string) []string {
	conf := fmt.Sprintf(`server.document-root = "/srv/www"
server.port = %d
server.bind = "127.0.0.1"
server.username = "web"
server.groupname = "web"
server.pid-file = "/run/lighttpd.pid"
index-file.names = ("index.html")
mimetype.assign = (".html" => "text/html")
`, port)
	return append([]string{`  - user: {name: web, system: true, home: /srv/www, shell: /usr/sbin/nologin}
  - file: {path: /usr/sbin/policy-rc.d, content: "#!/bin/sh\nexit 101\n", mode: "0755"}
  - package: {name: lighttpd, requires: [file:/usr/sbin/policy-rc.d]}
  - directory: {path: /srv}
  - directory: {path: /srv/www, owner: web, group: web}
  - file: {path: /srv/www/index.html, content: ` + strconv.Quote(page) + `, owner: web, group: web}
  - file:
      path: /etc/lighttpd/lighttpd.conf
      content: ` + strconv.Quote(conf) + `
      requires: [package:lighttpd]
      notify: [unit:lighttpd.service]
  - unit: {name: lighttpd.service, enabled: true, active: true, refresh: reload, requires: [package:lighttpd]}
`}, extra...)
}

// declareWeb declares the web server at revision rev and waits for the
// reconcile of it to end; it returns that reconcile's completion.
func declareWeb(t *testing.T, h *systemd.Host, rev uint64, port int, page string, extra ...string) event.ReconcileCompletedPayload {
	t.Helper()
	h.Bed.MustMeshctl("declare", h.Node, h.Bed.Declare(h.Node, rev, testbeds.Files{"/etc/motd": fmt.Sprintf("revision %d\n", rev)}, webDeclaration(port, page, extra...)...))
	return completed(t, h, rev)
}

// completed waits for a reconcile of revision rev to end, and returns the
// latest one's completion.
func completed(t *testing.T, h *systemd.Host, rev uint64) event.ReconcileCompletedPayload {
	t.Helper()
	var done event.ReconcileCompletedPayload
	testbeds.Eventually(t, 3*time.Minute, fmt.Sprintf("%s reconciles revision %d", h.Node, rev), func() error {
		recs, err := h.Records()
		if err != nil {
			return err
		}
		for _, r := range slices.Backward(recs) {
			if r.Kind != event.ReconcileCompleted {
				continue
			}
			p, err := r.DecodePayload()
			if err != nil {
				return err
			}
			if c := p.(*event.ReconcileCompletedPayload); c.Revision == rev && !c.Quiet {
				done = *c
				return nil
			}
		}
		return fmt.Errorf("no reconcile of revision %d has ended; the host's journal ends:\n%s", rev, tailRecords(recs, 12))
	})
	return done
}

func tailRecords(recs []event.Record, n int) string {
	var b strings.Builder
	for _, r := range recs[max(0, len(recs)-n):] {
		fmt.Fprintf(&b, "  #%d %s %s %s\n", r.Seq, r.Kind, r.Resource, r.Payload)
	}
	return b.String()
}

// freePort is a port of this machine's loopback no one listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serves waits until the web server answers page on port.
func serves(t *testing.T, port int, page string) {
	t.Helper()
	client := http.Client{Timeout: 2 * time.Second}
	testbeds.Eventually(t, 30*time.Second, fmt.Sprintf("the web server answers on port %d", port), func() error {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if string(b) != page {
			return fmt.Errorf("it answers %d %q, want %q", resp.StatusCode, b, page)
		}
		return nil
	})
}

// reloads counts the reloads systemd has begun of the web server: a
// "Reloading" line in its journal for each reload job.
func reloads(t *testing.T, c *systemd.Container) int {
	t.Helper()
	return strings.Count(c.Journal(2000, "lighttpd.service"), "Reloading ")
}

// kinds are the records of kind k about resource id, in order.
func ofKind(recs []event.Record, k event.Kind, id string) []event.Record {
	var out []event.Record
	for _, r := range recs {
		if r.Kind == k && (id == "" || r.Resource == id) {
			out = append(out, r)
		}
	}
	return out
}

// TestSystemdWebServer is a real service from a Debian package, run by
// the host under a real systemd (issue 28, c and e): installed by the
// package driver, configured by a file, reloaded by the relation, exactly
// once when its configuration changes and not at all when it does not;
// stopped by hand and started again at once, the drift journaled; the
// host killed between the configuration's write and the reload, and the
// owed reload delivered by the host systemd's launcher starts again. It
// runs as a user the declaration makes, which owns its files.
func TestSystemdWebServer(t *testing.T) {
	h := node(t)
	const unit = "unit:lighttpd.service"
	port := freePort(t)
	if c := declareWeb(t, h, 2, port, "one\n"); c.Result != event.ResultConverged {
		t.Fatalf("revision 2: %s, %d failed; the host's journal ends:\n%s", c.Result, c.Failed, tailRecords(mustRecords(t, h), 30))
	}
	serves(t, port, "one\n")
	if st := h.Try("dpkg-query", "-W", "-f", "${Status}", "lighttpd").Stdout; st != "install ok installed" {
		t.Errorf("lighttpd is %q, want installed by the host", st)
	}

	// e: the user the declaration made owns the files and runs the server.
	uid := strings.Split(strings.TrimSpace(h.MustExec("getent", "passwd", "web")), ":")[2]
	if owner := strings.TrimSpace(h.MustExec("stat", "-c", "%u:%g", "/srv/www/index.html")); !strings.HasPrefix(owner, uid+":") {
		t.Errorf("index.html is owned by %s, want the declared user web (%s)", owner, uid)
	}
	main := strings.TrimSpace(strings.TrimPrefix(h.MustExec("systemctl", "show", "-p", "MainPID", "lighttpd.service"), "MainPID="))
	if status := h.MustExec("cat", "/proc/"+main+"/status"); !strings.Contains(status, "\nUid:\t"+uid+"\t") {
		t.Errorf("the web server (pid %s) does not run as web (%s):\n%s", main, uid, status)
	}

	// c: a changed configuration reloads it exactly once.
	before := reloads(t, h.Container)
	port2 := freePort(t)
	if c := declareWeb(t, h, 3, port2, "one\n"); c.Result != event.ResultConverged || c.Refreshed != 1 {
		t.Fatalf("revision 3: %s, %d refreshed, want converged and 1", c.Result, c.Refreshed)
	}
	serves(t, port2, "one\n")
	if got := reloads(t, h.Container) - before; got != 1 {
		t.Errorf("a changed configuration reloaded the web server %d times, want once", got)
	}
	recs := mustRecords(t, h)
	if done := ofKind(recs, event.RefreshDone, unit); len(done) == 0 || !strings.Contains(string(done[len(done)-1].Payload), `"did":"reloaded"`) {
		t.Errorf("no refresh.done saying reloaded: %v", done)
	}

	// ...and not at all when the configuration does not change.
	before = reloads(t, h.Container)
	declareWeb(t, h, 4, port2, "two\n")
	serves(t, port2, "two\n")
	if got := reloads(t, h.Container) - before; got != 0 {
		t.Errorf("an unchanged configuration reloaded the web server %d times, want none", got)
	}

	// Stopped by hand: drift, found because systemd says so, and repaired.
	head := mustRecords(t, h)
	h.MustExec("systemctl", "stop", "lighttpd.service")
	testbeds.Eventually(t, time.Minute, "the host starts the web server again", func() error {
		if st := strings.TrimSpace(h.Try("systemctl", "is-active", "lighttpd.service").Stdout); st != "active" {
			return fmt.Errorf("lighttpd.service is %s", st)
		}
		return nil
	})
	serves(t, port2, "two\n")
	after := mustRecords(t, h)[len(head):]
	drift := ofKind(after, event.DriftObserved, unit)
	if len(drift) == 0 || !strings.Contains(string(drift[0].Payload), `"active"`) {
		t.Fatalf("no drift.observed of the unit's activity after it was stopped by hand:\n%s", tailRecords(after, 20))
	}
	var repaired bool
	for _, r := range ofKind(after, event.ResourceApplied, unit) {
		repaired = repaired || r.Cause == drift[0].Seq
	}
	if !repaired {
		t.Errorf("the unit's repair does not name the drift as its cause:\n%s", tailRecords(after, 20))
	}
	var watched bool
	for _, r := range ofKind(after, event.ReconcileStarted, "") {
		watched = watched || strings.Contains(string(r.Payload), `"trigger":"watch"`)
	}
	if !watched {
		t.Errorf("the repair was not started by the service manager's word (trigger watch), but by:\n%s", tailRecords(after, 20))
	}

	// Killed between the configuration's write and the reload: a slow
	// step between the two (an exec ordered after the file, before the
	// unit) holds the reconcile there while the host is killed.
	before = reloads(t, h.Container)
	head = mustRecords(t, h)
	port3 := freePort(t)
	slow := `  - exec: {name: slow-step, command: [/bin/sh, -c, "sleep 5; touch /var/tmp/slow-done"], creates: /var/tmp/slow-done, timeout: 1m, requires: [file:/etc/lighttpd/lighttpd.conf]}
  - directory: {path: /var/tmp}
`
	// Not waiting for the node's report: the kill falls before it.
	h.Bed.MustMeshctl("declare", "--wait", "0", h.Node, h.Bed.Declare(h.Node, 5, testbeds.Files{"/etc/motd": "revision 5\n"}, webDeclaration(port3, "two\n", slow)...))
	var owed event.Record
	testbeds.Eventually(t, time.Minute, "the changed configuration owes the web server a reload", func() error {
		recs, err := h.Records()
		if err != nil {
			return err
		}
		o := ofKind(recs[len(head):], event.RefreshOwed, unit)
		if len(o) == 0 {
			return fmt.Errorf("no refresh.owed yet")
		}
		if d := ofKind(recs[len(head):], event.RefreshDone, unit); len(d) > 0 {
			return fmt.Errorf("the reload was delivered before the kill: the slow step did not hold the reconcile")
		}
		owed = o[0]
		return nil
	})
	_, serve := processes(t, h)
	kill(t, serve)
	c := completed(t, h, 5)
	serves(t, port3, "two\n")
	recs = mustRecords(t, h)
	var restarted uint64
	for _, r := range ofKind(recs[len(head):], event.HostStarted, "") {
		restarted = r.Seq
	}
	done := ofKind(recs[len(head):], event.RefreshDone, unit)
	switch {
	case restarted == 0 || restarted < owed.Seq:
		t.Errorf("no host.started after the refresh.owed (#%d): the kill did not land", owed.Seq)
	case len(done) != 1 || done[0].Seq < restarted:
		t.Errorf("want one refresh.done after the restart (#%d), got %v", restarted, done)
	case c.Result != event.ResultConverged:
		t.Errorf("the reconcile after the kill: %s", c.Result)
	}
	if got := reloads(t, h.Container) - before; got != 1 {
		t.Errorf("the owed reload was delivered %d times, want once", got)
	}
	if st := h.Mesh("status").Stdout; strings.Contains(st, "refresh owed") {
		t.Errorf("a refresh is still owed:\n%s", st)
	}
}

// TestSystemdExec: execs run by the host under a real systemd (issue 28,
// d): a migration guarded by creates runs once over several reconciles;
// an exec whose daemonised child outlives its timeout is killed with
// everything it started, its transient scope with it, and the failure
// says so.
func TestSystemdExec(t *testing.T) {
	h := node(t)
	const migrate = `  - directory: {path: /srv}
  - directory: {path: /srv/app}
  - exec:
      name: migrate
      command: [/bin/sh, -c, 'echo migrated >> /srv/app/migrations; touch /srv/app/migrated']
      creates: /srv/app/migrated
      requires: [directory:/srv/app]
`
	for rev := uint64(2); rev <= 4; rev++ {
		h.Bed.MustMeshctl("declare", h.Node, h.Bed.Declare(h.Node, rev, testbeds.Files{"/etc/motd": fmt.Sprintf("revision %d\n", rev)}, migrate))
		if c := completed(t, h, rev); c.Result != event.ResultConverged {
			t.Fatalf("revision %d: %s", rev, c.Result)
		}
	}
	if got := h.MustExec("cat", "/srv/app/migrations"); got != "migrated\n" {
		t.Errorf("the migration ran %d times over three reconciles, want once", strings.Count(got, "migrated"))
	}

	// A daemon that outlives the exec's timeout. The copy of sleep under
	// a name of its own tells its processes from anything else.
	const daemon = `  - exec:
      name: daemonises
      command: [/bin/sh, -c, 'cp /bin/sleep /srv/app/mesh-orphan; setsid /srv/app/mesh-orphan 1000 & /srv/app/mesh-orphan 1000']
      creates: /srv/app/never
      timeout: 3s
      requires: [directory:/srv/app]
`
	h.Bed.Meshctl("declare", "--wait", "0", h.Node, h.Bed.Declare(h.Node, 5, testbeds.Files{"/etc/motd": "revision 5\n"}, migrate, daemon))
	c := completed(t, h, 5)
	if c.Result != event.ResultFailed || c.Failed != 1 {
		t.Fatalf("revision 5: %s, %d failed; want the exec failed", c.Result, c.Failed)
	}
	recs := mustRecords(t, h)
	failed := ofKind(recs, event.ResourceApplied, "exec:daemonises")
	if len(failed) == 0 || !strings.Contains(string(failed[len(failed)-1].Payload), "timed out after 3s") {
		t.Errorf("the exec's outcome does not say it timed out: %v", failed)
	}
	testbeds.Eventually(t, 30*time.Second, "nothing the exec started is left running", func() error {
		if ps := h.Try("pgrep", "-a", "-f", "mesh-orphan").Stdout; strings.TrimSpace(ps) != "" {
			return fmt.Errorf("still running:\n%s", ps)
		}
		if scopes := h.Try("systemctl", "list-units", "--all", "--no-legend", "mesh-exec-*").Stdout; strings.TrimSpace(scopes) != "" {
			return fmt.Errorf("a transient scope is left:\n%s", scopes)
		}
		return nil
	})
}

// BenchmarkSystemdPushToReload: the time from `meshctl declare` of a
// changed web server configuration (its port) to the server answering on
// the new port, reloaded by the relation, under a real systemd: the
// push, the host's admission and reconcile, the file, the owed reload
// journaled and delivered, and lighttpd's graceful restart. Reported as
// the median (p50-ms) and the slowest (max-ms) of the iterations.
func BenchmarkSystemdPushToReload(b *testing.B) {
	h := node(b)
	port := freePort(b)
	rev := uint64(2)
	h.Bed.MustMeshctl("declare", h.Node, h.Bed.Declare(h.Node, rev, testbeds.Files{"/etc/motd": "x\n"}, webDeclaration(port, "page\n")...))
	var took []time.Duration
	client := http.Client{Timeout: time.Second}
	for b.Loop() {
		rev++
		port = freePort(b)
		doc := h.Bed.Declare(h.Node, rev, testbeds.Files{"/etc/motd": "x\n"}, webDeclaration(port, "page\n")...)
		start := time.Now()
		h.Bed.MustMeshctl("declare", "--wait", "0", h.Node, doc)
		for {
			resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
			if err == nil {
				resp.Body.Close()
				break
			}
			if time.Since(start) > time.Minute {
				b.Fatalf("revision %d: the web server does not answer on %d after a minute: %v", rev, port, err)
			}
			time.Sleep(2 * time.Millisecond) // a poll's period, not a wait for a state
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
}

// BenchmarkSystemdStoppedToRunning: the time from `systemctl stop` of a
// unit the host holds active to the unit active again: the manager's
// word over D-Bus (Watcher), the host's reconcile of trigger watch, the
// start job. The drift timer (10 minutes by default) is the floor
// without it. Reported as the median (p50-ms) and the slowest (max-ms).
func BenchmarkSystemdStoppedToRunning(b *testing.B) {
	h := node(b)
	port := freePort(b)
	h.Bed.MustMeshctl("declare", h.Node, h.Bed.Declare(h.Node, 2, testbeds.Files{"/etc/motd": "x\n"}, webDeclaration(port, "page\n")...))
	var took []time.Duration
	for b.Loop() {
		// systemd refuses a sixth start within 10 s (StartLimitBurst):
		// the stops are paced apart, outside the time measured.
		b.StopTimer()
		time.Sleep(2100 * time.Millisecond)
		b.StartTimer()
		start := time.Now()
		h.MustExec("systemctl", "stop", "lighttpd.service")
		for strings.TrimSpace(h.Try("systemctl", "is-active", "lighttpd.service").Stdout) != "active" {
			if time.Since(start) > time.Minute {
				b.Fatalf("lighttpd.service is not active a minute after it was stopped")
			}
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
}
