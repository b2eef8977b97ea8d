// Command versus measures mesh-host against CFEngine side by side on this
// machine: whole processes, start to exit, on the same files for both, runs
// interleaved with a sync before each, every run checked for the content and
// mode of every file, and every no-op run checked to have rewritten nothing.
// It prints a markdown table (docs/performance.md holds the latest).
//
//	go run ./testbeds/versus                      # 1,000 and 10,000 files, 3 runs each
//	go run ./testbeds/versus --install            # first apt-get install cfengine3 if cf-agent is missing
//	go run ./testbeds/versus --files 100000 --runs 1
//
// CFEngine is not a dependency of any test: without cf-agent the rows are
// measured for mesh-host alone, and the program says so.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags say.
type config struct {
	sizes   []int
	runs    int
	applies int
	install bool
	agent   string
	dir     string
}

// Main runs the comparison and returns its exit code: 1 when a run wrote
// the wrong thing (a figure that cannot be trusted), 2 on bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	if err := run(cfg, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "versus: %v\n", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fl := flag.NewFlagSet("versus", flag.ContinueOnError)
	fl.SetOutput(stderr)
	files := fl.String("files", "1000,10000", "Numbers of files, comma-separated: a first-apply and a no-op row for each.")
	runs := fl.Int("runs", 3, "Runs of each tool per row, interleaved; the table shows the median.")
	applies := fl.Int("journal-applies", 10, "Applies of an unchanged 1,000-file declaration whose journal growth is measured.")
	install := fl.Bool("install", false, "Install Debian's cfengine3 (apt-get install -y) when cf-agent is missing.")
	agent := fl.String("cf-agent", "cf-agent", "The CFEngine agent to run, looked up on PATH.")
	dir := fl.String("dir", os.TempDir(), "Where to make the sandbox roots (removed at the end); the filesystem under test.")
	if err := fl.Parse(args); err != nil {
		return config{}, err
	}
	cfg := config{runs: *runs, applies: *applies, install: *install, agent: *agent, dir: *dir}
	for _, f := range strings.Split(*files, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "versus: --files: %q is not a number of files\n", f)
			return config{}, errors.New("bad --files")
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if cfg.runs < 1 || cfg.applies < 1 {
		fmt.Fprintln(stderr, "versus: --runs and --journal-applies must be at least 1")
		return config{}, errors.New("bad counts")
	}
	return cfg, nil
}

func run(cfg config, stdout, stderr io.Writer) error {
	tmp, err := os.MkdirTemp(cfg.dir, "mesh-versus-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := buildMeshHost(tmp)
	if err != nil {
		return err
	}
	agent, err := findAgent(cfg.agent, cfg.install)
	if err != nil {
		return err
	}
	if agent == "" {
		fmt.Fprintf(stderr, "versus: CFEngine is missing (no %s on PATH): measuring mesh-host only; --install installs Debian's cfengine3\n", cfg.agent)
	}
	var rows []row
	for _, n := range cfg.sizes {
		fmt.Fprintf(stderr, "versus: %d files...\n", n)
		r, err := measureSize(tmp, bin, agent, n, cfg.runs)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	fmt.Fprintf(stderr, "versus: journal growth over %d applies...\n", cfg.applies)
	growth, err := journalGrowth(tmp, bin, cfg.applies)
	if err != nil {
		return err
	}
	printHeader(stdout, agent, cfg)
	printTable(stdout, rows, growth)
	return nil
}

// measureSize writes the files of n for both tools and measures a first
// apply, then a no-op run on what it left.
func measureSize(tmp, bin, agent string, n, runs int) ([]row, error) {
	dir := filepath.Join(tmp, strconv.Itoa(n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := &meshHost{bin: bin, decl: filepath.Join(dir, "decl.yaml"), dir: filepath.Join(dir, "mesh-host"), state: filepath.Join(dir, "state")}
	if err := writeDeclaration(m.decl, n); err != nil {
		return nil, err
	}
	tools := []contender{m}
	if agent != "" {
		c := &cfengine{agent: agent, policy: filepath.Join(dir, "policy.cf"), dir: filepath.Join(dir, "cfengine")}
		if err := writePolicy(c.policy, c.dir, n); err != nil {
			return nil, err
		}
		tools = []contender{c, m}
	}
	first, err := measure(fmt.Sprintf("first apply, %s files (mesh-host durable)", count(n)), tools, n, runs, applyRun, nil)
	if err != nil {
		return nil, err
	}
	noop, err := measure(fmt.Sprintf("no-op drift check, %s files (`mesh-host check`; cf-agent again)", count(n)), tools, n, runs, noopRun, &first)
	if err != nil {
		return nil, err
	}
	// Each tool's own extra: the cost of making CFEngine's apply durable.
	for _, t := range tools {
		if c, ok := t.(*cfengine); ok {
			first.synced = c.synced
		}
	}
	return []row{first, noop}, nil
}

// count writes n with thousands separators, as the table does.
func count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// journalGrowth applies an unchanged 1,000-file declaration applies+1
// times and returns what the journal grew by per apply after the first.
func journalGrowth(tmp, bin string, applies int) (growth, error) {
	dir := filepath.Join(tmp, "journal")
	m := &meshHost{bin: bin, decl: filepath.Join(dir, "decl.yaml"), dir: filepath.Join(dir, "root"), state: filepath.Join(dir, "state")}
	if err := m.reset(); err != nil {
		return growth{}, err
	}
	if err := writeDeclaration(m.decl, 1000); err != nil {
		return growth{}, err
	}
	var before, after journalSize
	for i := range applies + 1 {
		if _, err := m.apply(); err != nil {
			return growth{}, err
		}
		size, err := measureJournal(m.journal())
		if err != nil {
			return growth{}, err
		}
		if i == 0 {
			before = size
		}
		after = size
	}
	if err := verify(m.dir, 1000); err != nil {
		return growth{}, err
	}
	return growth{applies: applies, file: (after.file - before.file) / int64(applies), inUse: (after.inUse - before.inUse) / int64(applies)}, nil
}

func printHeader(w io.Writer, agent string, cfg config) {
	cfe := "CFEngine missing: mesh-host only"
	if agent != "" {
		if out, err := exec.Command(agent, "--version").Output(); err == nil {
			cfe = strings.TrimSpace(string(out)) + " (`cf-agent -K -f POLICY`)"
		}
	}
	fmt.Fprintf(w, "%s, %s; %d runs a row, median shown; %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), cfg.runs, cfe)
}

// machine names what the figures were measured on.
func machine() string {
	out, err := exec.Command("nproc").Output()
	cores := strings.TrimSpace(string(out))
	if err != nil {
		cores = "?"
	}
	return cores + " cores"
}
