// Package buildprogress tells a person that `go build -v` is getting on: a
// first build compiles every dependency and takes minutes on a small
// machine, and silence that long reads as a hang.
//
// It imports the standard library alone, so that the demo's launcher,
// which `go run` compiles before it can print a word, compiles in seconds.
package buildprogress

import (
	"bytes"
	"fmt"
	"io"
	"time"
)

// Every is how often Writer says how far the build is.
const Every = 3 * time.Second

// Writer takes `go build -v`'s stderr, where the go command names each
// package as it compiles it, keeps all of it in Out (for an error), and
// writes a line to W every few seconds counting the packages compiled.
type Writer struct {
	W        io.Writer
	Out      bytes.Buffer
	start    time.Time
	said     time.Time
	packages int
}

// New is a Writer telling w, counting time from now.
func New(w io.Writer) *Writer {
	now := time.Now()
	return &Writer{W: w, start: now, said: now}
}

func (p *Writer) Write(b []byte) (int, error) {
	p.Out.Write(b)
	p.packages += bytes.Count(b, []byte("\n"))
	if time.Since(p.said) >= Every {
		p.said = time.Now()
		fmt.Fprintf(p.W, "  %d packages compiled (%s)\n", p.packages, time.Since(p.start).Round(time.Second))
	}
	return len(b), nil
}
