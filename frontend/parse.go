package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/autopar/autopar/ir"
)

// maxErrors is how many diagnostics one Parse reports before it gives up: past ten, later
// errors are mostly echoes of earlier ones and a reader fixes from the top anyway.
const maxErrors = 10

// Parse reads a graph in the .ir text format that ir.Print writes:
//
//	graph mlp                         # optional
//	param w1: f32[784,128] init="normal"
//	input x: f32[32,784] batch=0      # data input; limit=N bounds integer data
//	state m: f32[784,128]             # optimizer state
//	h = matmul x, w1                  # NAME = OP operands attrs
//	s = reduce_sum h axes=[1]
//	output s
//	update w1 <- w1.next
//
// The format is SSA in file order: an operand must be defined on an earlier line (a use of
// a later name is reported as "used before its definition", which is how a cycle shows up).
// output and update lines may name any value of the file. Every value goes through
// ir.Graph.Append, so the op table's arity, attribute and shape rules run with the position of
// the offending token, and the finished graph passes ir.Verify.
//
// Beyond ir's rules, the parser bounds sizes so that no input overflows or runs long: a
// tensor has at most 2^50 elements and 64 dims (declared or inferred), an int list at most
// 64 entries.
//
// A NUL byte or a byte that is not valid UTF-8, anywhere (comments included), is an error
// at its line and column: such a file is binary or in another encoding.
//
// filename is used only in positions. On any mistake Parse returns a nil graph and an
// ir.ErrorList of up to ten positioned diagnostics (file:line:col: message), continuing after
// a bad line so that independent mistakes are reported together. Parse never panics on any
// input; Print(Parse(Print(g))) is byte-identical to Print(g).
func Parse(filename string, src []byte) (*ir.Graph, error) {
	return ParseLimited(filename, src, 0)
}

// A ValuesError is a model with more values than the limit it was parsed under.
type ValuesError struct {
	Pos   ir.Pos // the line that defines the first value past the limit
	Limit int
}

func (e *ValuesError) Error() string {
	return fmt.Sprintf("%s: the model has more than %d values, the limit", e.Pos, e.Limit)
}

// ParseLimited is Parse that stops with a *ValuesError as soon as the graph holds more than
// maxValues values (0: no limit), so that a model of millions of ops is refused in the time
// its first maxValues take, not after parsing it all.
func ParseLimited(filename string, src []byte, maxValues int) (*ir.Graph, error) {
	// A byte-order mark some editors write is skipped, as Go's scanner does; columns on the
	// first line then count from after it, where the reader's eye starts.
	src = bytes.TrimPrefix(src, []byte("\uFEFF"))
	p := &parser{file: filename, src: src, g: ir.NewGraph(""), maxValues: maxValues}
	n := estimateValues(src)
	if maxValues > 0 {
		n = min(n, maxValues+1)
	}
	p.defs = make(map[string]definition, n)
	// Appending to a Graph copies Values each time it outgrows them; for a training step
	// that was a quarter of the parse time.
	p.g.Values = make([]ir.Value, 0, n)
	p.run()
	if p.tooMany != nil {
		return nil, p.tooMany
	}
	return p.finish()
}

// estimateValues bounds the number of values src defines, for sizing: each is on its own
// line, an op line has an '=' and a declaration a ':'. The count of either overestimates by
// the attributes (name=value) but, unlike a line count, is not inflated by blank lines.
func estimateValues(src []byte) int {
	lines := bytes.Count(src, []byte{'\n'}) + 1
	marks := bytes.Count(src, []byte{'='}) + bytes.Count(src, []byte{':'})
	return min(lines, marks)
}

// ParseFile reads and parses the .ir file at path, refusing a file over
// DefaultMaxFileBytes; positions name path as given.
func ParseFile(path string) (*ir.Graph, error) {
	src, err := ReadFile(path, DefaultMaxFileBytes)
	var se *SizeError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("%w; to read it, call ReadFile with a larger limit, then Parse", err)
	}
	if err != nil {
		return nil, err
	}
	return ParseModel(path, src, 0)
}

// ParseModel parses src, the text of the model file at path, as ParseFile does once it has
// read it, under ParseLimited's limit of maxValues (0: none). Unlike Parse, it refuses a file
// with nothing in it (Parse reads that as the empty graph): a model file that is empty, or
// holds only comments, is a mistake, named as such.
func ParseModel(path string, src []byte, maxValues int) (*ir.Graph, error) {
	if len(bytes.TrimSpace(bytes.TrimPrefix(src, []byte("\uFEFF")))) == 0 {
		return nil, ir.ErrorList{ir.Errorf(ir.Pos{File: path, Line: 1, Col: 1},
			"the file is empty, expected a model in .ir text (autopar model NAME writes one)")}.Err()
	}
	g, err := ParseLimited(path, src, maxValues)
	if err == nil && len(g.Values) == 0 {
		return nil, ir.ErrorList{ir.Errorf(ir.Pos{File: path, Line: 1, Col: 1},
			"the file defines no values, expected a model in .ir text (autopar model NAME writes one)")}.Err()
	}
	return g, err
}

// DefaultMaxFileBytes is the most ParseFile reads: 64 MiB, some 1.2 million lines, past any
// model autopar can plan in reasonable time (a 1,000-layer GPT is 2.3 MB).
const DefaultMaxFileBytes = 64 << 20

// A SizeError is a file that holds more than the limit it was read under (or, like
// /dev/zero, never ends).
type SizeError struct {
	Path  string
	Limit int64
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("%s: larger than the limit of %s on input files", e.Path, formatSize(e.Limit))
}

// ReadFile reads the file at path through an io.LimitReader, returning a *SizeError once it
// holds more than max bytes, so that a huge file or an endless one (/dev/zero, a FIFO) is
// refused after reading max+1 bytes instead of filling memory.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > max {
		return nil, &SizeError{Path: path, Limit: max}
	}
	src, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(src)) > max {
		return nil, &SizeError{Path: path, Limit: max}
	}
	return src, nil
}

// formatSize prints a byte count in the largest binary unit that divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		unit string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return fmt.Sprintf("%d %s", n/u.size, u.unit)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// definition records where a name was defined and what it became. id is ir.NoValue when the
// definition had an error: uses of such a name are skipped silently, so that one mistake does
// not cascade into an "undefined" error on every later line.
type definition struct {
	pos ir.Pos
	id  ir.ValueID
}

// pendingRef is a name on an output or update line, resolved once the whole file is read.
type pendingRef struct {
	name string
	pos  ir.Pos
}

type pendingOutput struct {
	value pendingRef
	pos   ir.Pos
}

type pendingUpdate struct {
	target, value pendingRef
	pos           ir.Pos
}

// parser holds the state of one Parse.
type parser struct {
	file string
	src  []byte
	g    *ir.Graph
	defs map[string]definition

	line int     // current 1-based line
	toks []token // tokens of the current line, ending in tokEOL
	i    int     // next token

	args     []ir.ValueID // operand buffer, reused (Append copies it)
	attrPos  []attrAt     // attribute positions of the current line, reused
	prov     lineProv     // the provenance written on the current line
	provs    []pendingProv
	graphPos ir.Pos // where the graph line was, if any
	outputs  []pendingOutput
	updates  []pendingUpdate

	errs    ir.ErrorList
	stopped bool // too many errors, or too many values

	maxValues int          // 0: no limit
	tooMany   *ValuesError // set when the graph passed maxValues
	later     map[string]ir.Pos
}

// run parses the source line by line.
func (p *parser) run() {
	src := p.src
	for len(src) > 0 && !p.stopped {
		line := src
		if nl := bytes.IndexByte(src, '\n'); nl >= 0 {
			line, src = src[:nl], src[nl+1:]
		} else {
			src = nil
		}
		p.line++
		if col, msg := badText(line); col > 0 {
			p.errorf(ir.Pos{File: p.file, Line: p.line, Col: col}, "%s", msg)
			p.badLine(line[:col-1])
			continue
		}
		p.toks = lexLine(line, p.toks)
		p.i = 0
		p.statement()
		if p.maxValues > 0 && len(p.g.Values) > p.maxValues {
			p.tooMany = &ValuesError{Pos: ir.Pos{File: p.file, Line: p.line, Col: 1}, Limit: p.maxValues}
			p.stopped = true
		}
	}
}

// statement dispatches one line on its first tokens. NAME = ... is an op even when NAME is
// a keyword, so a value may be called "output" or "param".
func (p *parser) statement() {
	t := p.toks
	switch {
	case t[0].kind == tokEOL:
		return
	case t[0].kind == tokIdent && t[1].kind == tokEq:
		p.opLine()
		return
	case t[0].kind != tokIdent:
		p.malformed(t[0])
		return
	}
	switch string(t[0].text) {
	case "param":
		p.declLine(ir.OpParam)
	case "input":
		p.declLine(ir.OpInput)
	case "state":
		p.declLine(ir.OpState)
	case "output":
		p.outputLine()
	case "update":
		p.updateLine()
	case "graph":
		p.graphLine()
	default:
		p.malformed(t[0])
	}
}

func (p *parser) malformed(t token) {
	p.errorf(p.pos(t), "unexpected %s at the start of a line: want param, input or state NAME: TYPE, "+
		"NAME = OP operands attrs, output NAME, update NAME <- NAME, or graph NAME", t.describe())
}

// badLine records the name a line with a bad byte would have defined, read from the text
// before that byte, as a failed definition: its uses are then silent rather than
// "undefined" echoes of the one error.
func (p *parser) badLine(prefix []byte) {
	p.toks = lexLine(prefix, p.toks)
	if t, ok := definedName(p.toks); ok {
		if _, dup := p.defs[string(t.text)]; !dup {
			p.defs[string(t.text)] = definition{p.pos(t), ir.NoValue}
		}
	}
}

// opLine parses NAME = OP a, b, c key=value ...
func (p *parser) opLine() {
	nameTok := p.toks[0]
	name, namePos := string(nameTok.text), p.pos(nameTok)
	if p.duplicate(name, namePos) {
		return
	}
	p.i = 2
	id := p.opRest(name)
	p.defs[name] = definition{namePos, id}
}

// opRest parses what follows "NAME =" and appends the value, returning ir.NoValue after
// reporting any error. Operands are resolved before name is defined, so x = add x, y is a
// use before definition.
func (p *parser) opRest(name string) ir.ValueID {
	opTok, ok := p.expect(tokIdent, "an op name")
	if !ok {
		return ir.NoValue
	}
	opPos := p.pos(opTok)
	op, known := ir.LookupOp(string(opTok.text))
	switch {
	case !known:
		p.errorf(opPos, "unknown op %s%s", clip(string(opTok.text)), suggestOp(string(opTok.text)))
		return ir.NoValue
	case op.IsLeaf():
		p.errorf(opPos, "%s is declared as `%s NAME: TYPE`, not applied as an op", op, op)
		return ir.NoValue
	}
	args, argsOK := p.operands()
	at, attrsOK := p.attrs(op)
	if !argsOK || !attrsOK {
		return ir.NoValue
	}
	id, err := p.g.Append(op, name, args, at, opPos)
	if err != nil {
		p.addError(p.relocate(err, opPos))
		return ir.NoValue
	}
	if !p.checkSize(p.g.Values[id].Type, opPos, op.String()+": result") || !p.applyProv(id, opPos) {
		return ir.NoValue
	}
	return id
}

// operands parses the comma-separated operand names and resolves them. An operand is a
// name not followed by '=' (that would be the first attribute).
func (p *parser) operands() ([]ir.ValueID, bool) {
	p.args = p.args[:0]
	ok := true
	for p.isOperand() {
		id, found := p.resolve(p.next())
		ok = ok && found
		p.args = append(p.args, id)
		if p.peek().kind != tokComma {
			break
		}
		comma := p.next()
		if !p.isOperand() {
			p.errorf(p.pos(p.peek()), "unexpected %s after %s, want an operand name", p.peek().describe(), comma.describe())
			return nil, false
		}
	}
	return p.args, ok
}

func (p *parser) isOperand() bool {
	return p.peek().kind == tokIdent && p.toks[p.i+1].kind != tokEq
}

// resolve finds the value an operand names. It reports an undefined name, or a name defined
// only on a later line, at the operand; it returns false silently for a name whose own
// definition failed.
func (p *parser) resolve(t token) (ir.ValueID, bool) {
	if d, ok := p.defs[string(t.text)]; ok {
		return d.id, d.id != ir.NoValue
	}
	name, pos := string(t.text), p.pos(t)
	if at, ok := p.laterDefinition(name); ok {
		p.errorf(pos, "%s is used before its definition: values must be defined on an earlier line", name).
			WithNote(at, "%s is defined here", name)
	} else {
		p.errorf(pos, "undefined value %s%s", clip(name), p.suggestValue(name))
	}
	return ir.NoValue, false
}

// declLine parses param|input|state NAME: TYPE attrs.
func (p *parser) declLine(op ir.Op) {
	p.i = 1
	nameTok, ok := p.expect(tokIdent, "the name of the "+op.String())
	if !ok {
		return
	}
	name, namePos := string(nameTok.text), p.pos(nameTok)
	if p.duplicate(name, namePos) {
		return
	}
	p.defs[name] = definition{namePos, p.declRest(op, name, namePos)}
}

func (p *parser) declRest(op ir.Op, name string, namePos ir.Pos) ir.ValueID {
	if _, ok := p.expect(tokColon, "':' and the type, as in "+op.String()+" "+name+": f32[8,512]"); !ok {
		return ir.NoValue
	}
	t, typeOK := p.parseType()
	if !typeOK {
		return ir.NoValue
	}
	at, attrsOK := p.attrs(op)
	if !attrsOK {
		return ir.NoValue
	}
	id, err := p.g.Append(op, name, nil, at.With("type", t), namePos)
	if err != nil {
		p.addError(p.relocate(err, namePos))
		return ir.NoValue
	}
	if !p.applyProv(id, namePos) {
		return ir.NoValue
	}
	return id
}

// duplicate reports name if it is already defined (even by a line that had an error).
func (p *parser) duplicate(name string, pos ir.Pos) bool {
	d, dup := p.defs[name]
	if dup {
		p.errorf(pos, "%s is defined twice", name).WithNote(d.pos, "first defined here")
	}
	return dup
}

// outputLine parses output NAME; the name is resolved after the last line.
func (p *parser) outputLine() {
	kw := p.pos(p.toks[0])
	p.i = 1
	t, ok := p.expect(tokIdent, "the name of the value to output")
	if ok && p.expectEOL() {
		p.outputs = append(p.outputs, pendingOutput{pendingRef{string(t.text), p.pos(t)}, kw})
	}
}

// updateLine parses update TARGET <- VALUE.
func (p *parser) updateLine() {
	kw := p.pos(p.toks[0])
	p.i = 1
	target, ok := p.expect(tokIdent, "the param or state to update")
	if !ok {
		return
	}
	if _, ok := p.expect(tokArrow, "'<-' and the new value, as in update w <- w.next"); !ok {
		return
	}
	value, ok := p.expect(tokIdent, "the name of the new value")
	if ok && p.expectEOL() {
		p.updates = append(p.updates, pendingUpdate{
			target: pendingRef{string(target.text), p.pos(target)},
			value:  pendingRef{string(value.text), p.pos(value)},
			pos:    kw,
		})
	}
}

// graphLine parses graph NAME.
func (p *parser) graphLine() {
	kw := p.pos(p.toks[0])
	p.i = 1
	t, ok := p.expect(tokIdent, "the graph's name")
	if !ok || !p.expectEOL() {
		return
	}
	if p.graphPos.IsValid() {
		p.errorf(kw, "the graph is named twice").WithNote(p.graphPos, "first named here")
		return
	}
	p.graphPos = kw
	p.g.Name = string(t.text)
}

// Token cursor.

func (p *parser) peek() token { return p.toks[p.i] }

// next returns the current token and advances, never past the final tokEOL.
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOL {
		p.i++
	}
	return t
}

func (p *parser) pos(t token) ir.Pos { return ir.Pos{File: p.file, Line: p.line, Col: t.col} }

// expect consumes a token of kind k or reports "unexpected X, want <want>".
func (p *parser) expect(k tokKind, want string) (token, bool) {
	t := p.peek()
	if t.kind != k {
		p.errorf(p.pos(t), "unexpected %s, want %s", t.describe(), want)
		return t, false
	}
	return p.next(), true
}

func (p *parser) expectEOL() bool {
	_, ok := p.expect(tokEOL, "end of line")
	return ok
}
