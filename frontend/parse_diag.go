package frontend

import (
	"bytes"
	"slices"
	"strings"

	"github.com/autopar/autopar/internal/textdist"
	"github.com/autopar/autopar/ir"
)

// Diagnostics of the parser: collecting errors, placing ir's errors on the right token,
// "did you mean" suggestions, and the end-of-file resolution of outputs and updates.

// errorf records an error at pos and returns it so the caller can add notes.
func (p *parser) errorf(pos ir.Pos, format string, args ...any) *ir.Error {
	e := ir.Errorf(pos, format, args...)
	p.addError(e)
	return e
}

// addError records e, or, past maxErrors, a final "too many errors" that stops the parse.
func (p *parser) addError(e *ir.Error) {
	switch {
	case p.stopped:
	case len(p.errs) == maxErrors:
		p.errs = append(p.errs, ir.Errorf(e.Pos, "too many errors, stopping"))
		p.stopped = true
	default:
		p.errs = append(p.errs, e)
	}
}

// relocate moves an error from ir.Graph.Append (positioned at the op) onto the attribute it
// is about, when its message names one that the line spells out: "dropout: rate must be in
// [0, 1)" points at rate=. Anything else stays at the op.
func (p *parser) relocate(err error, at ir.Pos) *ir.Error {
	e, ok := err.(*ir.Error)
	if !ok {
		e = &ir.Error{Pos: at, Msg: err.Error()}
	}
	msg := e.Msg
	if _, rest, found := strings.Cut(msg, ": "); found {
		msg = rest
	}
	for _, a := range p.attrPos {
		if mentionsWord(msg, a.name) {
			return &ir.Error{Pos: a.pos, Msg: e.Msg, Notes: e.Notes}
		}
	}
	return e
}

// mentionsWord reports whether w occurs in msg as a whole word.
func mentionsWord(msg, w string) bool {
	for i := 0; i < len(msg); {
		j := strings.Index(msg[i:], w)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(w)
		before := j == 0 || msg[j-1] == ' '
		after := end == len(msg) || strings.IndexByte(" :,", msg[end]) >= 0
		if before && after {
			return true
		}
		i = j + 1
	}
	return false
}

// laterDefinition finds where name is first defined, if on this line or a later one. The
// definitions of the whole file are indexed on first use, so files without such a mistake
// never pay for it.
func (p *parser) laterDefinition(name string) (ir.Pos, bool) {
	if p.later == nil {
		p.later = map[string]ir.Pos{}
		var toks []token
		src := p.src
		for line := 1; len(src) > 0; line++ {
			text := src
			if nl := bytes.IndexByte(src, '\n'); nl >= 0 {
				text, src = src[:nl], src[nl+1:]
			} else {
				src = nil
			}
			toks = lexLine(text, toks)
			if t, ok := definedName(toks); ok {
				if _, seen := p.later[string(t.text)]; !seen {
					p.later[string(t.text)] = ir.Pos{File: p.file, Line: line, Col: t.col}
				}
			}
		}
	}
	pos, ok := p.later[name]
	return pos, ok && pos.Line >= p.line
}

// definedName returns the token of the name a line defines, the way statement reads it.
func definedName(toks []token) (token, bool) {
	switch {
	case toks[0].kind != tokIdent:
		return token{}, false
	case toks[1].kind == tokEq:
		return toks[0], true
	case toks[1].kind != tokIdent:
		return token{}, false
	}
	switch string(toks[0].text) {
	case "param", "input", "state":
		return toks[1], true
	}
	return token{}, false
}

// suggestOp is ", did you mean matmul?" for a misspelt op, or "".
func suggestOp(name string) string {
	var names []string
	for _, op := range ir.AllOps() {
		if !op.IsLeaf() {
			names = append(names, op.String())
		}
	}
	return suggest(name, names)
}

// suggestValue suggests the closest name defined so far. Names of one or two characters get
// no suggestion: x2 for x1 is a guess, not a hint.
func (p *parser) suggestValue(name string) string {
	names := make([]string, 0, len(p.g.Values))
	for i := range p.g.Values {
		names = append(names, p.g.Values[i].Name)
	}
	return suggest(name, names)
}

// suggest returns ", did you mean X?" for the first candidate closest to name within an
// edit distance of a third of its length (at most 3), or "". Names longer than
// maxSuggestLen get none: the distance is quadratic in the length, and a typo in a
// 100-character name is better found by eye than by a guess.
func suggest(name string, candidates []string) string {
	if len(name) > maxSuggestLen {
		return ""
	}
	limit := min(3, len(name)/3)
	if len(name) >= 3 {
		limit = max(limit, 1)
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if c == name || len(c)-len(name) >= bestD || len(name)-len(c) >= bestD {
			continue
		}
		if d := textdist.Distance(name, c, bestD); d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	return ", did you mean " + best + "?"
}

const maxSuggestLen = 64

// finish resolves outputs, updates and provenance, runs ir.Verify on an error-free graph and returns
// either the graph or every error, never both.
func (p *parser) finish() (*ir.Graph, error) {
	if !p.stopped {
		p.resolveOutputs()
		p.resolveUpdates()
		p.resolveProvs()
	}
	if len(p.errs) > 0 {
		return nil, p.errs.Err()
	}
	if err := ir.Verify(p.g); err != nil {
		return nil, err
	}
	// Values was sized by an estimate: clip it, so a pass appending to a copy of the slice
	// header cannot write into the graph's spare capacity.
	p.g.Values = slices.Clip(p.g.Values)
	return p.g, nil
}

// lookupRef resolves a name on an output or update line; like resolve, it is silent about a
// name whose definition failed.
func (p *parser) lookupRef(r pendingRef) (ir.ValueID, bool) {
	if d, ok := p.defs[r.name]; ok {
		return d.id, d.id != ir.NoValue
	}
	p.errorf(r.pos, "undefined value %s%s", clip(r.name), p.suggestValue(r.name))
	return ir.NoValue, false
}

func (p *parser) resolveOutputs() {
	for _, o := range p.outputs {
		if id, ok := p.lookupRef(o.value); ok {
			p.g.AddOutput(id, o.pos)
		}
	}
}

// resolveUpdates checks each update the way ir.Verify does, but positioned on the token at
// fault: the target must be a param or state updated once, with a value of its type.
func (p *parser) resolveUpdates() {
	first := map[ir.ValueID]ir.Pos{}
	for _, u := range p.updates {
		t, okT := p.lookupRef(u.target)
		v, okV := p.lookupRef(u.value)
		if !okT || !okV {
			continue
		}
		tv, vv := &p.g.Values[t], &p.g.Values[v]
		prev, twice := first[t]
		switch {
		case tv.Op != ir.OpParam && tv.Op != ir.OpState:
			p.errorf(u.target.pos, "update target %s must be a param or state, is %s", tv.Name, tv.Op)
		case !tv.Type.Equal(vv.Type):
			p.errorf(u.value.pos, "update of %s: %s is %s but %s is %s", tv.Name, tv.Name, tv.Type, vv.Name, vv.Type)
		case twice:
			p.errorf(u.target.pos, "%s is updated twice", tv.Name).WithNote(prev, "first updated here")
		default:
			first[t] = u.target.pos
			p.g.AddUpdate(t, v, u.pos)
		}
	}
}
