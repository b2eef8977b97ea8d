package main

import (
	"slices"
	"strings"
	"sync"
)

// redactor replaces, in what a driver shows of a command's output or a
// unit's journal, every secret value the host opened for the reconcile:
// a service that prints its own password must not put it in the journal.
// The drivers also redact what looks like a credential whatever its
// value (password=..., token=...).
type redactor struct {
	mu     sync.Mutex
	values []string
}

// minRedacted is the shortest value redacted: a secret of a character or
// two would turn every output into marks, and tells nothing found there.
const minRedacted = 4

// redactedMark stands where a secret's value was.
const redactedMark = "[secret]"

// add remembers a secret's value, and each of its lines long enough to be
// told apart: a key printed by a command is printed a line at a time.
func (r *redactor) add(value []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := string(value)
	if len(v) >= minRedacted {
		r.values = append(r.values, v)
	}
	if strings.Contains(v, "\n") {
		for line := range strings.SplitSeq(v, "\n") {
			if line = strings.TrimSpace(line); len(line) >= 2*minRedacted {
				r.values = append(r.values, line)
			}
		}
	}
}

// Redact returns s with every secret value replaced by a mark; longer
// values first, so that a value holding another is replaced whole.
func (r *redactor) Redact(s string) string {
	r.mu.Lock()
	values := slices.Clone(r.values)
	r.mu.Unlock()
	slices.SortFunc(values, func(a, b string) int { return len(b) - len(a) })
	for _, v := range values {
		s = strings.ReplaceAll(s, v, redactedMark)
	}
	return s
}

// redactor returns the env's redactor, made at first use: the reconcile
// that opens secrets and the drivers it is given share it.
func (e *env) redactor() *redactor {
	if e.redact == nil {
		e.redact = &redactor{}
	}
	return e.redact
}
