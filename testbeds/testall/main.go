// Command testall runs every test (`go test ./...`, with any flags given)
// and then names each tool this machine lacks whose tests were skipped for
// it, with how to get it: `go test` shows nothing of a passing package's
// skips, so without this a machine without shellcheck would pass the
// packaging tests it never ran, silently.
//
//	go run ./testbeds/testall            # every test, then the missing tools
//	go run ./testbeds/testall -race ./journal/...
//	go run ./testbeds/testall -missing   # the Debian packages to install, one a line
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// tool is a program some tests drive for real, and where it comes from.
type tool struct {
	name   string // the command looked up on PATH
	debian string // the Debian package that provides it; "" when not one
	get    string // how to get it otherwise
	tests  string // which tests skip without it
}

// tools is every program a test skips without. Keep it in step with the
// tests' own skip messages.
var tools = []tool{
	{name: "dpkg", debian: "dpkg", tests: "the package driver (drivers/pkg) and the .deb checks (packaging/build)"},
	{name: "dpkg-deb", debian: "dpkg", tests: "the .deb checks (packaging/build)"},
	{name: "systemctl", debian: "systemd", tests: "the unit driver (drivers/unit)"},
	{name: "systemd-analyze", debian: "systemd", tests: "the unit driver's verification (drivers/unit)"},
	{name: "tar", debian: "tar", tests: "archives made by the real tar (drivers/archive, testbeds)"},
	{name: "zip", debian: "zip", tests: "zip archives made by the real zip (drivers/archive)"},
	{name: "zstd", debian: "zstd", tests: "tar.zst made by the real tar (drivers/archive)"},
	{name: "shellcheck", debian: "shellcheck", tests: "the lint of the launcher and the install scripts (upgrade, packaging)"},
	{name: "rpm", debian: "rpm", tests: "the .rpm checks beyond its lead (packaging/build)"},
	{name: "cf-agent", debian: "cfengine3", tests: "the CFEngine policy of the side-by-side comparison, run for real (testbeds/versus)"},
	{name: "puppet", debian: "puppet", tests: "the Puppet manifest of the side-by-side comparison, run for real (testbeds/versus)"},
	{name: "debootstrap", debian: "debootstrap", tests: "the real-systemd test bed's Debian tree (testbeds/systemd)"},
	{name: "systemd-nspawn", debian: "systemd-container", tests: "the real-systemd test bed, systemd booted as PID 1 (testbeds/systemd)"},
	{name: "chromium", debian: "chromium", tests: "the web view in a real browser, headless (testbeds TestWeb)"},
	{name: "nats", get: "go install github.com/nats-io/natscli/nats@v0.5.0", tests: "the events stream's forgery test with the stock CLI (cmd/meshctl/client)"},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "-missing" {
		seen := map[string]bool{}
		for _, t := range missing() {
			if t.debian != "" && !seen[t.debian] {
				seen[t.debian] = true
				fmt.Fprintln(stdout, t.debian)
			}
		}
		return 0
	}
	goArgs := append([]string{"test"}, args...)
	if !hasPackages(args) {
		goArgs = append(goArgs, "./...")
	}
	cmd := exec.Command("go", goArgs...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	code := 0
	if err := cmd.Run(); err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else {
			fmt.Fprintf(stderr, "testall: %v\n", err)
		}
	}
	report(stdout)
	return code
}

// hasPackages reports whether args name packages (anything not a flag
// nor a flag's value is taken for one).
func hasPackages(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "./") || strings.HasPrefix(a, "github.com/") || a == "." {
			return true
		}
	}
	return false
}

func missing() []tool {
	var out []tool
	for _, t := range tools {
		if _, err := exec.LookPath(t.name); err != nil {
			out = append(out, t)
		}
	}
	return out
}

// report names the tools missing, or says none is.
func report(w io.Writer) {
	gone := missing()
	if len(gone) == 0 {
		fmt.Fprintln(w, "testall: every tool the tests drive is here; nothing was skipped for a missing tool")
		return
	}
	var names, debs []string
	for _, t := range gone {
		names = append(names, t.name)
		if t.debian != "" && !slices.Contains(debs, t.debian) {
			debs = append(debs, t.debian)
		}
	}
	fmt.Fprintf(w, "testall: SKIPPED for missing tools: %s\n", strings.Join(names, ", "))
	for _, t := range gone {
		how := t.get
		if t.debian != "" {
			how = "Debian package " + t.debian
		}
		fmt.Fprintf(w, "  %-16s %s (%s)\n", t.name, t.tests, how)
	}
	if len(debs) > 0 {
		fmt.Fprintf(w, "  get them: sudo apt-get install %s\n", strings.Join(debs, " "))
	}
	for _, t := range gone {
		if t.get != "" {
			fmt.Fprintf(w, "  get %s: %s (and have %s on PATH)\n", t.name, t.get, filepath.Join("$(go env GOPATH)", "bin"))
		}
	}
}
