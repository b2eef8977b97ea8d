package testbeds_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds"
)

// xssHostname is a machine's name that a browser would run as markup,
// were it put in a page unescaped.
const xssHostname = `<img src=x onerror=alert(1)>`

// The files the web fleet fails to write: their parent directories
// neither exist nor are declared, so each apply fails, for real.
const (
	dbFailing     = "/srv/missing/app.conf"
	canaryFailing = "/opt/missing/app.conf"
)

// pageWait bounds a wait for something a page shows: data reaches the
// control service a moment after what made it (a heartbeat, a record),
// and a loaded machine is slow. Nothing waits it out when all is well.
const pageWait = 30 * time.Second

// webMesh is the mesh the browser tests look at: web-1 (the canary,
// failed in wave 0 of a halted rollout) and web-2 (role=web, pending in
// it), db-1 (role=db, failing a resource of its own declaration) and,
// when run as root, odd-1 (role=odd, a machine named xssHostname).
type webMesh struct {
	*testbeds.Bed
	rollout string // the halted rollout's id
	odd     bool   // odd-1 runs, named xssHostname
}

// TestWeb drives the web view of a real `meshctl serve`, over real hosts,
// in a real headless chromium: one mesh and one browser for every
// subtest, which is most of its time. Every tab of it fails its subtest
// on any error the browser logs (a console error, an exception, a
// policy's refusal, an asset that did not load) and on any dialog.
func TestWeb(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a mesh of real processes and a browser; skipped with -short")
	}
	chromium := needChromium(t)
	w := newWebMesh(t)
	browser := newBrowser(t, chromium)

	// Before any login: no cookie, in a browser context of its own.
	t.Run("Unauthorized", func(t *testing.T) {
		tab := openTab(t, browser, chromedp.WithNewBrowserContext())
		for _, path := range []string{"/", "/nodes/db-1", "/rollouts"} {
			// Each refused page's own 401 is logged as a load that failed:
			// those, and only those, are what this tab expects.
			tab.expectStatus(w.Control.WebURL()+path, http.StatusUnauthorized)
			resp, err := chromedp.Run(tab.timed(), chromedp.NavigateResponse(w.Control.WebURL()+path))
			if err != nil {
				t.Fatalf("load %s: %v", path, err)
			}
			if resp.Status != http.StatusUnauthorized {
				t.Errorf("%s without a token: status %d, want 401", path, resp.Status)
			}
			if !evalIn[bool](t, tab, `!!document.querySelector('form#login input#token')`) {
				t.Errorf("%s without a token does not show the login form", path)
			}
			if evalIn[bool](t, tab, `!!document.querySelector('table#nodes, section#failing, table#rollouts')`) {
				t.Errorf("%s without a token shows the operator's page", path)
			}
		}
		tab.screenshot("login-401")
	})

	login(t, browser, w)

	t.Run("Fleet", func(t *testing.T) {
		tab := openTab(t, browser)
		all := []string{"db-1", "web-1", "web-2"}
		if w.odd {
			all = append(all, "odd-1")
		}
		tab.load(w.Control.WebURL()+"/", "table#nodes shows every node", fmt.Sprintf(
			`(() => { const shown = %s; return %s.every(n => shown.includes(n)) })()`, jsRows, jsStrings(all)))
		tab.screenshot("fleet")
		// The page says what the CLI says.
		for _, node := range []string{"db-1", "web-1"} {
			n, err := nodeState(w.Bed, node)
			if err != nil {
				t.Fatal(err)
			}
			row := fmt.Sprintf(`table#nodes tbody tr.node[data-node=%q]`, node)
			if got := evalIn[string](t, tab, jsText(row+" td.state")); !strings.HasPrefix(strings.TrimSpace(got), n.State) {
				t.Errorf("%s's state on the page %q, meshctl nodes says %q", node, got, n.State)
			}
			href := evalIn[string](t, tab, fmt.Sprintf(`(document.querySelector(%q) || {}).href || ""`, row+" td.name a"))
			if u, err := url.Parse(href); err != nil || u.Path != "/nodes/"+node {
				t.Errorf("%s's name links to %q, want /nodes/%s", node, href, node)
			}
		}
		if got := evalIn[string](t, tab, jsText(`tr.node[data-node="db-1"] td.failing`)); !strings.Contains(got, "1") {
			t.Errorf("db-1 fails one resource; its failing cell says %q", got)
		}
		if got := evalIn[string](t, tab, jsText(`tr.node[data-node="db-1"] td.desired`)); !strings.Contains(got, "2") {
			t.Errorf("db-1 is declared revision 2; its desired cell says %q", got)
		}
		for _, sel := range []string{"div#counts .count-state[data-state]", "svg#versions-chart", "svg#drift-chart", "form#filter input[name=select]"} {
			if !evalIn[bool](t, tab, fmt.Sprintf(`!!document.querySelector(%q)`, sel)) {
				t.Errorf("the fleet page has no %s", sel)
			}
		}

		// Filtered through the page's own form, as a person would.
		if _, err := chromedp.RunResponse(tab.timed(),
			chromedp.SetValue(chromedp.CSS(`form#filter input[name=select]`), "role=web"),
			chromedp.Submit(chromedp.CSS(`form#filter input[name=select]`)),
		); err != nil {
			t.Fatalf("filter by role=web: %v", err)
		}
		if got := evalIn[string](t, tab, `new URL(location.href).searchParams.get("select") || ""`); got != "role=web" {
			t.Errorf("the filter's page has select=%q, want role=web", got)
		}
		if got := evalIn[[]string](t, tab, jsRows); strings.Join(got, ",") != "web-1,web-2" {
			t.Errorf("role=web lists %q, want web-1 and web-2", got)
		}
		tab.screenshot("fleet-role=web")

		// A selector that does not parse is said to be wrong, not taken
		// for "every node" nor for none.
		bad := w.Control.WebURL() + "/?select=" + url.QueryEscape("role in (")
		resp, err := chromedp.Run(tab.timed(), chromedp.NavigateResponse(bad))
		if err != nil {
			t.Fatalf("load %s: %v", bad, err)
		}
		if resp.Status != http.StatusOK {
			// A page that says the request was bad, and says so with its
			// status: the browser logs that status, as this tab expects.
			tab.expectStatus(bad, int(resp.Status))
		}
		if got := evalIn[string](t, tab, jsText("p#select-problem")); strings.TrimSpace(got) == "" {
			t.Errorf("a selector that does not parse: no p#select-problem")
		}
		tab.screenshot("fleet-bad-selector")
	})

	t.Run("NodeFailing", func(t *testing.T) {
		tab := openTab(t, browser)
		id := "file:" + dbFailing
		// The failure comes with the heartbeat, the history with the
		// events stream, which may follow it by a moment: the page is
		// ready once it has both, and replay --verify could be checked.
		tab.load(w.Control.WebURL()+"/nodes/db-1", "db-1's page names its failing resource, in its failures and its history",
			fmt.Sprintf(`Array.from(document.querySelectorAll('section#failing li.failing .resource')).some(e => e.textContent.includes(%[1]q)) &&
				Array.from(document.querySelectorAll('section#history li.record .resource')).some(e => e.textContent.includes(%[1]q)) &&
				/^(holds|differs)/.test((document.querySelector('#verify') || {}).textContent?.trim())`, id))
		tab.screenshot("node-db-1")
		if got := evalIn[string](t, tab, jsText("h1")); !strings.Contains(got, "db-1") {
			t.Errorf("db-1's page is headed %q", got)
		}
		reason := evalIn[string](t, tab, fmt.Sprintf(`(Array.from(document.querySelectorAll('section#failing li.failing')).find(li => (li.querySelector('.resource') || {}).textContent.includes(%q)) || document.createElement('p')).querySelector('.reason')?.textContent || ""`, id))
		if !strings.Contains(reason, "parent directory does not exist") || !strings.Contains(reason, "/srv/missing") {
			t.Errorf("%s's reason on the page is %q; want the apply's error (parent directory does not exist, declare /srv/missing)", id, reason)
		}
		// Its history: the declaration that asked for it and the apply that
		// failed, each a record with its kind and its time.
		kinds := evalIn[[]string](t, tab, `Array.from(document.querySelectorAll('section#history li.record .kind')).map(e => e.textContent.trim())`)
		if !containsString(kinds, "declaration.received") || !containsString(kinds, "resource.applied") {
			t.Errorf("db-1's history shows the kinds %q; want a declaration.received and a resource.applied", kinds)
		}
		if !evalIn[bool](t, tab, fmt.Sprintf(`Array.from(document.querySelectorAll('section#history li.record')).some(li => (li.querySelector('.resource') || {}).textContent?.includes(%q) && (li.querySelector('.time') || {}).textContent?.trim())`, id)) {
			t.Errorf("db-1's history has no timed record of %s", id)
		}
		for _, sel := range []string{"section#last-good", "section#refreshes", "section#facts", "#hostname"} {
			if !evalIn[bool](t, tab, fmt.Sprintf(`!!document.querySelector(%q)`, sel)) {
				t.Errorf("db-1's page has no %s", sel)
			}
		}
		if got := evalIn[string](t, tab, jsText("#verify")); !strings.HasPrefix(strings.TrimSpace(got), "holds") {
			t.Errorf("db-1's replay --verify says %q, want it to begin with holds", got)
		}
		// Its --why, through the page's own link.
		why := evalIn[string](t, tab, fmt.Sprintf(`(Array.from(document.querySelectorAll('a[href*="/why?"]')).find(a => new URL(a.href).searchParams.get("resource") === %q) || {}).href || ""`, id))
		if u, err := url.Parse(why); why == "" || err != nil || u.Path != "/nodes/db-1/why" {
			t.Fatalf("db-1's page has no link to the why of %s (got %q)", id, why)
		}
		tab.navigate(why)
		if got := evalIn[string](t, tab, jsText("section#why")); !strings.Contains(got, id) {
			t.Errorf("the why of %s says %q", id, got)
		}
		tab.screenshot("why-db-1")
	})

	t.Run("RolloutHalted", func(t *testing.T) {
		tab := openTab(t, browser)
		tab.load(w.Control.WebURL()+"/rollouts", "the rollouts list the halted one",
			fmt.Sprintf(`!!document.querySelector('table#rollouts tr.rollout[data-rollout=%q]')`, w.rollout))
		tab.screenshot("rollouts")
		tab.load(w.Control.WebURL()+"/rollouts/"+url.PathEscape(w.rollout), "the rollout's page says halted",
			`(document.querySelector('#rollout-state') || {}).textContent?.includes('halted')`)
		step := func(wave int, node string) string {
			return evalIn[string](t, tab, jsText(fmt.Sprintf(`section#waves div.wave[data-wave="%d"] li.step[data-node=%q] .step-state`, wave, node)))
		}
		if got := step(0, "web-1"); !strings.Contains(got, "failed") {
			t.Errorf("the canary web-1 in wave 0 is %q, want failed", got)
		}
		if got := step(1, "web-2"); !strings.Contains(got, "pending") {
			t.Errorf("web-2 in wave 1 is %q, want pending (never pushed)", got)
		}
		if n := evalIn[int](t, tab, `document.querySelectorAll('section#waves div.wave svg.progress').length`); n != 2 {
			t.Errorf("%d waves drawn as progress bars, want 2", n)
		}
		tab.screenshot("rollout-halted")
		// Live: the page follows the rollout without being loaded again.
		w.MustMeshctl("rollout", "abort")
		tab.poll("the open page shows the rollout aborted", `(document.querySelector('#rollout-state') || {}).textContent?.includes('aborted')`)
		tab.screenshot("rollout-aborted")
	})

	t.Run("HostnameIsText", func(t *testing.T) {
		if !w.odd {
			t.Skip("a host named " + xssHostname + " runs in a UTS namespace of its own, which only root makes")
		}
		tab := openTab(t, browser)
		tab.load(w.Control.WebURL()+"/nodes/odd-1", "odd-1's page shows its hostname",
			`(document.querySelector('#hostname') || {}).textContent?.trim() !== ""`)
		tab.screenshot("node-odd-1")
		if got := strings.TrimSpace(evalIn[string](t, tab, jsText("#hostname"))); got != xssHostname {
			t.Errorf("#hostname reads %q, want the name as text: %q", got, xssHostname)
		}
		if n := evalIn[int](t, tab, `document.querySelectorAll('#hostname img, #hostname *[onerror], img[src="x"]').length`); n != 0 {
			t.Errorf("the hostname made %d elements of the page", n)
		}
		// Wherever else the fleet page puts it.
		tab.navigate(w.Control.WebURL() + "/")
		if n := evalIn[int](t, tab, `document.querySelectorAll('img[src="x"], *[onerror]').length`); n != 0 {
			t.Errorf("the fleet page made %d elements of a hostname", n)
		}
		// A dialog would have failed the tab (openTab); the policy runs no
		// inline handler either, so the element is what to look for.
	})
}

// needChromium skips t unless Debian's chromium is installed, and returns
// its path.
func needChromium(t *testing.T) string {
	t.Helper()
	basetest.NeedTools(t, "chromium", "chromium")
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// newWebMesh starts the web fleet (see webMesh), its failures real.
func newWebMesh(t *testing.T) *webMesh {
	t.Helper()
	w := &webMesh{Bed: testbeds.NewWeb(t, bins)}
	for i, name := range []string{"web-1", "web-2"} {
		h := w.AddHost(name)
		h.Start()
		labels := []string{"label", name, "role=web"}
		if i == 0 {
			labels = append(labels, "canary=yes")
		}
		w.MustMeshctl(labels...)
	}
	db := w.AddHost("db-1")
	db.Start()
	w.MustMeshctl("label", "db-1", "role=db")
	if os.Geteuid() == 0 {
		odd := w.AddHost("odd-1")
		odd.Hostname = xssHostname
		odd.Start()
		w.MustMeshctl("label", "odd-1", "role=odd")
		w.odd = true
		// The machine's name is the host's own fact, journaled as such.
		var facts event.HostFactsPayload
		for _, rec := range kindsOf(odd.Records(), event.HostFacts) {
			if err := json.Unmarshal(rec.Payload, &facts); err != nil {
				t.Fatal(err)
			}
		}
		if facts.Hostname != xssHostname {
			t.Fatalf("odd-1 journaled the hostname %q, want %q", facts.Hostname, xssHostname)
		}
	}

	// db-1: a good revision, then one that fails.
	w.MustMeshctl("declare", "db-1", w.Declare("db-1", 1, testbeds.Files{"/etc/motd": "db 1\n"}))
	waitHeartbeat(t, w.Bed, "db-1", func(n nodeReport) bool { return n.Applied == 1 && n.Failed == 0 })
	failing := filepath.Join(w.Dir, "db-1-r2.yaml")
	doc := fmt.Sprintf("mesh: %s\nnode: db-1\nrevision: 2\nresources:\n  - file: {path: /etc/motd, content: \"db 2\\n\"}\n  - file: {path: %s, content: \"x\\n\"}\n", testbeds.Mesh, dbFailing)
	if err := os.WriteFile(failing, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	// declare waits for the apply, and says it failed.
	if r := w.Meshctl("declare", "db-1", failing); r.Code != 1 || !strings.Contains(r.Stderr, "db-1 reports 1 failed resource") {
		t.Fatalf("declare a file without its directory: %s", r)
	}
	waitHeartbeat(t, w.Bed, "db-1", func(n nodeReport) bool { return n.Desired == 2 && n.Failed > 0 })

	// A rollout whose canary fails halts in wave 0.
	writeProfile(t, w.Bed, "app", fmt.Sprintf("resources:\n  - file: {path: %s, content: \"x\\n\"}\n", canaryFailing), "--select", "role=web")
	r := w.Meshctl("rollout", "--select", "role=web", "--canary", "1", "--wait-healthy", "30s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "halted: canary web-1 failed in wave 0") {
		t.Fatalf("a rollout past a failing canary: %s", r)
	}
	st := rolloutStatus(t, w.Bed)
	if st.State != "halted" {
		t.Fatalf("the rollout is %s, want halted", st.State)
	}
	w.rollout = st.ID
	return w
}

// nodeReport is what a node's heartbeat says, as far as these tests look.
type nodeReport struct {
	Desired, Applied uint64
	Failed           int
}

// waitHeartbeat waits until meshctl nodes shows a heartbeat of node that
// satisfies ok.
func waitHeartbeat(t *testing.T, b *testbeds.Bed, node string, ok func(nodeReport) bool) {
	t.Helper()
	testbeds.Eventually(t, pageWait, node+"'s heartbeat", func() error {
		n, err := nodeState(b, node)
		if err != nil {
			return err
		}
		if n.Heartbeat == nil {
			return errors.New("none yet")
		}
		r := nodeReport{Desired: n.Heartbeat.Desired, Applied: n.Heartbeat.Applied, Failed: n.Heartbeat.Failed}
		if !ok(r) {
			return fmt.Errorf("it says %+v", r)
		}
		return nil
	})
}

// newBrowser starts a headless chromium for t, its profile, caches and
// home in a temporary directory that t removes, and stops it when t ends.
func newBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	dir := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
		chromedp.Flag("disk-cache-dir", filepath.Join(dir, "cache")),
		chromedp.WindowSize(1280, 900),
		// Nothing of the browser's lands in the home of whoever runs the
		// tests (~/.pki, ~/.cache, ~/.config).
		chromedp.Env("HOME="+dir, "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_CACHE_HOME="+filepath.Join(dir, "cache")),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit, so that TempDir can go
	})
	// The first run starts the browser, and it lives as long as ctx: no
	// timeout here (chromedp.Run's rule).
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return ctx
}

// login logs in through the real login form with a token meshctl web
// token printed, in the browser's default context: every later tab of it
// has the cookie.
func login(t *testing.T, browser context.Context, w *webMesh) {
	t.Helper()
	tab := openTab(t, browser)
	tab.navigate(w.Control.WebURL() + "/login")
	resp, err := chromedp.RunResponse(tab.timed(),
		chromedp.SetValue(chromedp.CSS("form#login input#token"), w.WebToken()),
		chromedp.Submit(chromedp.CSS("form#login input#token")),
	)
	if err != nil {
		t.Fatalf("log in: %v", err)
	}
	if resp.Status != 200 {
		t.Fatalf("after the login: status %d, want 200", resp.Status)
	}
	if got := evalIn[string](t, tab, `location.pathname`); got != "/" {
		t.Fatalf("the login led to %s, want /", got)
	}
	if evalIn[bool](t, tab, `!!document.querySelector('form#login')`) {
		t.Fatalf("the login form again after logging in: %s", evalIn[string](t, tab, jsText("#problem")))
	}
}

// tab is one browser tab of a test. It records every error the browser
// logs in it and every dialog it opens, and fails the test with them when
// the test ends.
type tab struct {
	t   *testing.T
	ctx context.Context
	// expected are the logged errors the test expects (expectStatus).
	expected map[string]bool

	mu       sync.Mutex
	problems []string
	seen     map[string]int // how often each problem was said
}

func openTab(t *testing.T, browser context.Context, opts ...chromedp.ContextOption) *tab {
	t.Helper()
	tb := &tab{t: t, seen: map[string]int{}, expected: map[string]bool{}}
	ctx, cancel := chromedp.NewContext(browser, append(opts, chromedp.WithListener(tb.listen))...)
	tb.ctx = ctx
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, p := range tb.problems {
			if !tb.expected[p] {
				t.Errorf("the browser said (%d times): %s", tb.seen[p], p)
			}
		}
	})
	return tb
}

// expectStatus says the page at url is answered with status, which the
// browser logs as a load that failed: that, and only that, is expected.
func (tb *tab) expectStatus(url string, status int) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.expected[fmt.Sprintf("network error: Failed to load resource: the server responded with a status of %d (%s) (%s)", status, http.StatusText(status), url)] = true
}

// listen runs on the tab's reading goroutine: it keeps what it sees and
// commands nothing (chromedp.Listen's rules), but for a dialog, which
// would stall the page until answered, answered from another goroutine.
func (tb *tab) listen(ev any) {
	var p string
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			p = "console.error: " + consoleArgs(e.Args)
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		p = fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, d.Text)
		if d.Exception != nil {
			p += " " + d.Exception.Description
		}
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError {
			p = fmt.Sprintf("%s error: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL)
		}
	case *page.EventJavascriptDialogOpening:
		p = fmt.Sprintf("a %s dialog opened: %q", e.Type, e.Message)
		go func() {
			_ = chromedp.Do(tb.ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
				_, err := cdp.Call(ctx, t, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
				return err
			}))
		}()
	}
	if p != "" {
		tb.mu.Lock()
		if tb.seen[p] == 0 {
			tb.problems = append(tb.problems, p)
		}
		tb.seen[p]++
		tb.mu.Unlock()
	}
}

func consoleArgs(args []*runtime.RemoteObject) string {
	var parts []string
	for _, a := range args {
		switch {
		case len(a.Value) > 0:
			parts = append(parts, string(a.Value))
		default:
			parts = append(parts, a.Description)
		}
	}
	return strings.Join(parts, " ")
}

// timed is the tab's context for one step, bounded.
func (tb *tab) timed() context.Context {
	ctx, cancel := context.WithTimeout(tb.ctx, pageWait)
	tb.t.Cleanup(cancel)
	return ctx
}

// navigate loads url in the tab and waits for it to load.
func (tb *tab) navigate(url string) {
	tb.t.Helper()
	if err := chromedp.Do(tb.timed(), chromedp.Navigate(url)); err != nil {
		tb.t.Fatalf("load %s: %v", url, err)
	}
}

// load loads url until the expression ready is true in it: what it shows
// may reach the control service a moment later (a server-rendered page
// is loaded again, not waited on).
func (tb *tab) load(url, what, ready string) {
	tb.t.Helper()
	testbeds.Eventually(tb.t, pageWait, what, func() error {
		resp, err := chromedp.Run(tb.timed(), chromedp.NavigateResponse(url))
		switch {
		case err != nil:
			return fmt.Errorf("load %s: %w", url, err)
		case resp.Status >= 400 && resp.Status < 500:
			// Refused or not there: loading it again changes nothing.
			return testbeds.Fatal(fmt.Errorf("%s: status %d: %.300q", url, resp.Status, tb.bodyText()))
		}
		ok, err := chromedp.Run(tb.timed(), chromedp.Evaluate[bool](truthy(ready)))
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", url, err)
		case !ok:
			return fmt.Errorf("%s shows %.2000q", url, tb.bodyText())
		}
		return nil
	})
}

// poll waits, without loading the page again, until cond is true in it.
// It evaluates from the Go side: chromedp.Poll builds its predicate with
// new Function, which the view's policy (no 'unsafe-eval') refuses, and
// which would log that refusal as the error these tests look for.
func (tb *tab) poll(what, cond string) {
	tb.t.Helper()
	testbeds.Eventually(tb.t, pageWait, what, func() error {
		ok, err := chromedp.Run(tb.timed(), chromedp.Evaluate[bool](truthy(cond)))
		switch {
		case err != nil:
			return err
		case !ok:
			return fmt.Errorf("the page shows %.2000q", tb.bodyText())
		}
		return nil
	})
}

func (tb *tab) bodyText() string {
	s, _ := chromedp.Run(tb.timed(), chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	return s
}

// screenshot writes the whole page, as a PNG, into the test's artifacts
// (kept with go test -artifacts), named for the page.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	png, err := chromedp.Run(tb.timed(), chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(tb.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Error(err)
		return
	}
	// The directory's name is go test's choice (random, under
	// -artifacts): say where, for whoever looks at a failure.
	tb.t.Logf("screenshot: %s", path)
}

// evalIn evaluates the JavaScript expression expr in tab's page.
func evalIn[T any](t *testing.T, tb *tab, expr string) T {
	t.Helper()
	v, err := chromedp.Run(tb.timed(), chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// truthy makes expr a boolean, whatever it gives (undefined included).
func truthy(expr string) string { return "!!(" + expr + ")" }

// jsText is the text of the first element sel matches; "" for none.
func jsText(sel string) string {
	return fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)
}

// jsRows are the nodes the fleet table lists, in its order.
const jsRows = `Array.from(document.querySelectorAll('table#nodes tbody tr.node')).map(r => r.dataset.node)`

func jsStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}
