package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// goTestLimit bounds a package's tests inside a container.
const goTestLimit = 3 * time.Minute

// CompileTests compiles the tests of the module's package pkg ("./drivers/unit")
// into dir, as `go test -c` does, static (CGO_ENABLED=0) so that it runs
// inside whatever the container's C library, and returns the binary's
// path. A package that does not exist is ErrNoPackage; one without tests,
// ErrNoTests.
func CompileTests(dir, pkg string) (string, error) {
	module, err := testbeds.ModuleRoot()
	if err != nil {
		return "", err
	}
	rel, ok := strings.CutPrefix(pkg, "./")
	if !ok {
		return "", fmt.Errorf("package %q: want a path in the module, ./DIR", pkg)
	}
	gofiles, _ := filepath.Glob(filepath.Join(module, rel, "*.go"))
	if len(gofiles) == 0 {
		return "", fmt.Errorf("%w: %s (no Go files in %s)", ErrNoPackage, pkg, filepath.Join(module, rel))
	}
	bin := filepath.Join(dir, strings.ReplaceAll(path.Clean(rel), "/", "-")+".test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, pkg)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c %s: %w\n%s", pkg, err, out)
	}
	// go test -c writes nothing for a package without test files.
	if _, err := os.Stat(bin); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %s", ErrNoTests, pkg)
	}
	return bin, nil
}

// GoTestResult is what a test binary run inside reported.
type GoTestResult struct {
	Output                  string
	Passed, Skipped, Failed []string
	// NoTests is set when no test matched the run pattern.
	NoTests bool
}

// GoTest compiles package pkg's tests on this machine (CompileTests, into
// Share), runs those matching run inside the container with -test.v and
// env added to the environment, in the package's directory when the
// container binds the module (Options.Module), else in /; and fails the
// test with their output if they fail. The error is CompileTests's, for
// the caller to skip a package that is not there.
func (c *Container) GoTest(tb TB, pkg, run string, env ...string) (GoTestResult, error) {
	tb.Helper()
	bin, err := CompileTests(c.Share, pkg)
	if err != nil {
		return GoTestResult{}, err
	}
	dir := "/"
	if c.module != "" {
		dir = filepath.Join(c.module, strings.TrimPrefix(pkg, "./"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), goTestLimit)
	defer cancel()
	inside := path.Join(SharePath, filepath.Base(bin))
	r, err := c.Run(ctx, Cmd{
		Args: []string{inside, "-test.v", "-test.run", run, "-test.timeout", (goTestLimit - 30*time.Second).String()},
		Env:  env,
		Dir:  dir,
	})
	res := parseGoTest(r.Stdout + r.Stderr)
	if err != nil {
		tb.Fatalf("%s's tests in %s: %v\n%s", pkg, c.Name, err, res.Output)
	}
	if r.Code != 0 {
		tb.Fatalf("%s's tests in %s failed (exit %d; failed: %s):\n%s", pkg, c.Name, r.Code, strings.Join(res.Failed, ", "), res.Output)
	}
	return res, nil
}

// parseGoTest reads -test.v's verdict lines.
func parseGoTest(out string) GoTestResult {
	res := GoTestResult{Output: out}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		for prefix, list := range map[string]*[]string{"--- PASS: ": &res.Passed, "--- SKIP: ": &res.Skipped, "--- FAIL: ": &res.Failed} {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				name, _, _ := strings.Cut(rest, " ")
				*list = append(*list, name)
			}
		}
		if strings.HasPrefix(line, "testing: warning: no tests to run") {
			res.NoTests = true
		}
	}
	return res
}
