// Command versus measures mesh-host against CFEngine and Puppet side by
// side on this machine: whole processes, start to exit, on the same files
// for each, runs interleaved with a sync before each, every run checked for
// the content and mode of every file, and every no-op run checked to have
// rewritten nothing. It prints a markdown table (docs/performance.md holds
// the latest).
//
//	go run ./testbeds/versus                      # 1,000 and 10,000 files, 3 runs each
//	go run ./testbeds/versus --install            # first apt-get install cfengine3 and puppet where missing
//	go run ./testbeds/versus --files 100000 --runs 1
//
// Neither CFEngine nor Puppet is a dependency of any test: without cf-agent
// or puppet the rows are measured without it, and the program says so.
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
	puppet  string
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
	install := fl.Bool("install", false, "Install Debian's cfengine3 and puppet (apt-get install -y) where cf-agent or puppet is missing.")
	agent := fl.String("cf-agent", "cf-agent", "The CFEngine agent to run, looked up on PATH.")
	puppetBin := fl.String("puppet", "puppet", "The Puppet command to run (puppet apply), looked up on PATH.")
	dir := fl.String("dir", os.TempDir(), "Where to make the sandbox roots (removed at the end); the filesystem under test.")
	if err := fl.Parse(args); err != nil {
		return config{}, err
	}
	cfg := config{runs: *runs, applies: *applies, install: *install, agent: *agent, puppet: *puppetBin, dir: *dir}
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
	agent, err := findTool(cfg.agent, "cfengine3", cfg.install)
	if err != nil {
		return err
	}
	if agent == "" {
		fmt.Fprintf(stderr, "versus: CFEngine is missing (no %s on PATH): measuring without it; --install installs Debian's cfengine3\n", cfg.agent)
	}
	puppetBin, err := findTool(cfg.puppet, "puppet", cfg.install)
	if err != nil {
		return err
	}
	if puppetBin == "" {
		fmt.Fprintf(stderr, "versus: Puppet is missing (no %s on PATH): measuring without it; --install installs Debian's puppet\n", cfg.puppet)
	}
	var rows []row
	for _, n := range cfg.sizes {
		fmt.Fprintf(stderr, "versus: %d files...\n", n)
		r, err := measureSize(tmp, bin, agent, puppetBin, n, cfg.runs)
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
	printHeader(stdout, agent, puppetBin, cfg)
	printTable(stdout, rows, growth)
	return nil
}

// measureSize writes the files of n for both tools and measures a first
// apply, then a no-op run on what it left.
func measureSize(tmp, bin, agent, puppetBin string, n, runs int) ([]row, error) {
	dir := filepath.Join(tmp, strconv.Itoa(n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := &meshHost{bin: bin, decl: filepath.Join(dir, "decl.yaml"), dir: filepath.Join(dir, "mesh-host"), state: filepath.Join(dir, "state")}
	if err := writeDeclaration(m.decl, n); err != nil {
		return nil, err
	}
	var tools []contender
	if agent != "" {
		c := &cfengine{agent: agent, policy: filepath.Join(dir, "policy.cf"), dir: filepath.Join(dir, "cfengine")}
		if err := writePolicy(c.policy, c.dir, n); err != nil {
			return nil, err
		}
		tools = append(tools, c)
	}
	if puppetBin != "" {
		p := &puppet{bin: puppetBin, manifest: filepath.Join(dir, "site.pp"), dir: filepath.Join(dir, "puppet"), state: filepath.Join(dir, "puppet-state")}
		if err := writeManifest(p.manifest, p.dir, n); err != nil {
			return nil, err
		}
		tools = append(tools, p)
	}
	tools = append(tools, m)
	first, err := measure(fmt.Sprintf("first apply, %s files (mesh-host durable)", count(n)), tools, n, runs, applyRun, nil)
	if err != nil {
		return nil, err
	}
	noop, err := measure(fmt.Sprintf("no-op drift check, %s files (`mesh-host check`; the others run again)", count(n)), tools, n, runs, noopRun, &first)
	if err != nil {
		return nil, err
	}
	repaired, err := measure(fmt.Sprintf("drift repair, %s files, 3 in 100 changed by hand (`mesh-host check`; the others run again)", count(n)), tools, n, runs, repairRun, &first)
	if err != nil {
		return nil, err
	}
	// The others' own extra: the cost of making their applies durable.
	first.synced = map[string][]time.Duration{}
	for _, t := range tools {
		if s, ok := t.(interface{ syncs() []time.Duration }); ok {
			first.synced[t.name()] = s.syncs()
		}
	}
	return []row{first, noop, repaired}, nil
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

func printHeader(w io.Writer, agent, puppetBin string, cfg config) {
	cfe := "CFEngine missing"
	if agent != "" {
		if out, err := exec.Command(agent, "--version").Output(); err == nil {
			cfe = strings.TrimSpace(string(out)) + " (`cf-agent -K -f POLICY`)"
		}
	}
	pup := "Puppet missing"
	if puppetBin != "" {
		if out, err := exec.Command(puppetBin, "--version").Output(); err == nil {
			pup = "Puppet " + strings.TrimSpace(string(out)) + " (`puppet apply MANIFEST`)"
		}
	}
	fmt.Fprintf(w, "%s, %s; %d runs a row, median shown; %s; %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), machine(), cfg.runs, cfe, pup)
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
