package labels

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Selector chooses nodes by their labels: every requirement must hold.
// The empty selector chooses every node.
type Selector struct {
	reqs []requirement
	text string
}

type op int

const (
	opEqual    op = iota // k=v (also k==v)
	opNotEqual           // k!=v: true also when k is absent
	opIn                 // k in (a,b)
	opNotIn              // k notin (a,b): true also when k is absent
	opExists             // k
	opAbsent             // !k
)

type requirement struct {
	key    string
	op     op
	values []string
}

// String is the selector as it was given.
func (s Selector) String() string { return s.text }

// Matches reports whether labels meet every requirement.
func (s Selector) Matches(labels Set) bool {
	for _, r := range s.reqs {
		v, has := labels[r.key]
		ok := false
		switch r.op {
		case opEqual:
			ok = has && v == r.values[0]
		case opNotEqual:
			ok = !has || v != r.values[0]
		case opIn:
			ok = has && slices.Contains(r.values, v)
		case opNotIn:
			ok = !has || !slices.Contains(r.values, v)
		case opExists:
			ok = has
		case opAbsent:
			ok = !has
		}
		if !ok {
			return false
		}
	}
	return true
}

// MaxSelectorBytes bounds a selector's text.
const MaxSelectorBytes = 4096

// Parse reads a selector: requirements separated by commas, each one of
//
//	key=value  key!=value  key in (v1,v2)  key notin (v1,v2)  key  !key
//
// Keys and values follow CheckKey and checkValue. An error names the
// position (a byte offset, from 1) and what was wanted there.
func Parse(text string) (Selector, error) {
	sel := Selector{text: text}
	if len(text) > MaxSelectorBytes {
		return sel, fmt.Errorf("%w: selector of %d bytes, over %d", ErrInvalid, len(text), MaxSelectorBytes)
	}
	p := &parser{s: text}
	p.space()
	if p.done() {
		return sel, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return sel, err
		}
		sel.reqs = append(sel.reqs, r)
		p.space()
		if p.done() {
			return sel, nil
		}
		if !p.eat(",") {
			return sel, p.fail("a comma between requirements")
		}
		p.space()
	}
}

type parser struct {
	s   string
	pos int
}

func (p *parser) done() bool { return p.pos >= len(p.s) }

func (p *parser) space() {
	for !p.done() && p.s[p.pos] == ' ' {
		p.pos++
	}
}

func (p *parser) eat(tok string) bool {
	if strings.HasPrefix(p.s[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

func (p *parser) fail(want string) error {
	got := "the end"
	if !p.done() {
		got = fmt.Sprintf("%q", p.s[p.pos:min(len(p.s), p.pos+12)])
	}
	return fmt.Errorf("%w: selector %q, at %d: want %s, got %s", ErrInvalid, p.s, p.pos+1, want, got)
}

// word reads a key or value: letters, digits, - _ .
func (p *parser) word() string {
	start := p.pos
	for !p.done() {
		c := rune(p.s[p.pos])
		if c < unicode.MaxASCII && (unicode.IsLetter(c) || unicode.IsDigit(c) || c == '-' || c == '_' || c == '.') {
			p.pos++
			continue
		}
		break
	}
	return p.s[start:p.pos]
}

func (p *parser) key() (string, error) {
	at := p.pos
	k := p.word()
	if k == "" {
		return "", p.fail("a label key")
	}
	if err := CheckKey(k); err != nil {
		return "", fmt.Errorf("selector %q, at %d: %w", p.s, at+1, err)
	}
	return k, nil
}

func (p *parser) value(k string) (string, error) {
	at := p.pos
	v := p.word()
	if err := checkValue(k, v); err != nil {
		return "", fmt.Errorf("selector %q, at %d: %w", p.s, at+1, err)
	}
	return v, nil
}

func (p *parser) requirement() (requirement, error) {
	if p.eat("!") {
		p.space()
		k, err := p.key()
		return requirement{key: k, op: opAbsent}, err
	}
	k, err := p.key()
	if err != nil {
		return requirement{}, err
	}
	p.space()
	switch {
	case p.eat("!="):
		p.space()
		v, err := p.value(k)
		return requirement{key: k, op: opNotEqual, values: []string{v}}, err
	case p.eat("=="), p.eat("="):
		p.space()
		v, err := p.value(k)
		return requirement{key: k, op: opEqual, values: []string{v}}, err
	case p.eat("notin"):
		vs, err := p.set(k)
		return requirement{key: k, op: opNotIn, values: vs}, err
	case p.eat("in"):
		vs, err := p.set(k)
		return requirement{key: k, op: opIn, values: vs}, err
	}
	return requirement{key: k, op: opExists}, nil
}

// set reads " (v1, v2)" after in or notin.
func (p *parser) set(k string) ([]string, error) {
	p.space()
	if !p.eat("(") {
		return nil, p.fail("( after in or notin")
	}
	var vs []string
	for {
		p.space()
		v, err := p.value(k)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
		p.space()
		if p.eat(")") {
			return vs, nil
		}
		if !p.eat(",") {
			return nil, p.fail("a comma or ) in the set")
		}
	}
}
