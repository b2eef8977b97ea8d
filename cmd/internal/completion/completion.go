// Package completion gives both command lines shell completion: the
// script a shell sources to ask the binary, and the binary's answer when
// the shell asks (kongplete, over the kong grammar itself, so that the
// completion never disagrees with the parser).
package completion

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"
)

// shells are the shells Script writes for.
var shells = []string{"bash", "zsh", "fish"}

// script is what shell evaluates to complete the command name by asking
// the binary at bin: bash and zsh run it with COMP_LINE set; fish sets it.
func script(shell, name, bin string) (string, error) {
	q := shellQuote(bin)
	switch shell {
	case "bash":
		return fmt.Sprintf("complete -C %s %s\n", q, name), nil
	case "zsh":
		return fmt.Sprintf("autoload -U +X bashcompinit && bashcompinit\ncomplete -C %s %s\n", q, name), nil
	case "fish":
		fn := "__complete_" + strings.ReplaceAll(name, "-", "_")
		return fmt.Sprintf(`function %[1]s
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    %[2]s
end
complete -f -c %[3]s -a "(%[1]s)"
`, fn, q, name), nil
	}
	return "", fmt.Errorf("no completion for shell %q (%s)", shell, strings.Join(shells, ", "))
}

// Answer answers a shell asking for completions (COMP_LINE is set) and
// then exits through the parser's exit hook; otherwise it does nothing.
func Answer(parser *kong.Kong) {
	if os.Getenv("COMP_LINE") == "" {
		return
	}
	kongplete.Complete(parser, kongplete.WithPredictor("file", complete.PredictFiles("*")))
}

// ScriptForThis is Script for this binary, under the command name name.
func ScriptForThis(shell, name string) (string, error) {
	bin, err := executable()
	if err != nil {
		return "", err
	}
	return script(shell, name, bin)
}

// executable is this binary's absolute path, for Script.
func executable() (string, error) {
	bin, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Abs(bin)
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
