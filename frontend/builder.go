package frontend

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/autopar/autopar/ir"
)

// Builder builds an ir.Graph from Go code, one method call per op, the way a tracing
// frontend records a training step: the model code calls b.MatMul(x, w) and gets back a
// Value whose type the op's shape rule inferred.
//
// Errors follow the bufio.Scanner pattern: the first mistake (a shape mismatch, a bad
// attribute, an operand from another builder) is recorded with the position of the Go line
// that made the call, every later call is a no-op returning an invalid Value, and Build
// returns the recorded error. Model code therefore needs no `if err` after every op.
//
// A Builder is cheap to copy: Scope and Named return builders that share the graph and the
// error but name what they make differently. A Builder is not safe for concurrent use.
type Builder struct {
	st *state
	// prefix is prepended to every name made through this builder ("l3.attn.").
	prefix string
	// name, when set, names the values made through this builder instead of the op name.
	name string
	// block is the model block the values made through this builder belong to (Block).
	block ir.Block
}

// state is what every builder derived from one NewBuilder shares.
type state struct {
	g    *ir.Graph
	err  error
	done bool
	// next[base] is the suffix to try first for an auto name, so that naming n values with
	// one base costs O(n) rather than the O(n²) of probing from .1 each time.
	next map[string]int
}

// Value is a handle on one value of a builder's graph. The zero Value, and a Value returned
// after the builder recorded an error, are invalid: their Type is the zero Type, and passing
// them to an op records an error (or is a no-op if one is already recorded).
type Value struct {
	st *state
	id ir.ValueID
}

// NewBuilder starts an empty graph with the given name (printed as `graph NAME`).
func NewBuilder(name string) *Builder {
	return &Builder{st: &state{g: ir.NewGraph(name), next: map[string]int{}}}
}

// Scope returns a builder that prefixes every name it makes with name and a dot, so a
// transformer's ops read l3.attn.q, l3.attn.softmax, ... Scopes nest:
// b.Scope("l3").Scope("attn"). Names are for people: what a pass learns of a value's place
// in the model comes from its Block.
func (b *Builder) Scope(name string) *Builder {
	c := *b
	c.prefix += name + "."
	c.name = ""
	return &c
}

// Block returns a builder whose values (and those of its scopes) belong to model block n:
// one transformer layer, MoE layer or residual block, numbered from 1 in model order (see
// ir.Block). Identical blocks are what the sharding pass solves once and ties; a model that
// marks none is still compiled, with no tying. A block number below 1 records an error.
func (b *Builder) Block(n int) *Builder {
	c := *b
	if err := ir.CheckBlock(int64(n)); err != nil {
		b.fail(ir.Errorf(callerPos(), "%v", err))
	}
	c.block = ir.Block(n)
	return &c
}

// Named returns a builder whose next op takes the given name (under b's scope) instead of
// an automatic one: b.Named("logits").MatMul(h, w). Every op made through the returned
// builder takes that name, so use it for one op; a second use records a duplicate-name error.
func (b *Builder) Named(name string) *Builder {
	c := *b
	c.name = name
	return &c
}

// Err returns the first error recorded so far, or nil.
func (b *Builder) Err() error { return b.st.err }

// Graph returns the graph built so far, for inspection while building. Use Build to finish.
func (b *Builder) Graph() *ir.Graph { return b.st.g }

// Build finishes the graph and returns it, or the first error recorded. A graph needs at
// least one output (the loss). Calls on the builder after Build record an error.
func (b *Builder) Build() (*ir.Graph, error) {
	st := b.st
	if st.err == nil && !st.done && len(st.g.Outputs) == 0 {
		st.err = ir.Errorf(callerPos(), "graph %s has no output, want at least the loss (call Output)", st.g.Name)
	}
	st.done = true
	if st.err != nil {
		return nil, st.err
	}
	return st.g, nil
}

// Output marks v as returned by the step. The first output of a model is its scalar loss.
func (b *Builder) Output(v Value) {
	if b.check("output", v) {
		b.st.g.AddOutput(v.id, callerPos())
	}
}

// Update records that value is target's content after the step (an optimizer's output).
// Target must be a param or state of the same type.
func (b *Builder) Update(target, value Value) {
	if !b.check("update", target, value) {
		return
	}
	g := b.st.g
	t, v := g.Value(target.id), g.Value(value.id)
	switch {
	case t.Op != ir.OpParam && t.Op != ir.OpState:
		b.fail(ir.Errorf(callerPos(), "update target %s must be a param or state, is %s", t.Name, t.Op))
	case !t.Type.Equal(v.Type):
		b.fail(ir.Errorf(callerPos(), "update of %s: %s is %s but %s is %s", t.Name, t.Name, t.Type, v.Name, v.Type))
	default:
		g.AddUpdate(target.id, value.id, callerPos())
	}
}

// Apply appends op applied to args with the given attributes, the one entry every op method
// goes through. Attributes left out take their defaults; a wrong attribute, arity or shape
// records an error positioned at the caller.
func (b *Builder) Apply(op ir.Op, at ir.Attrs, args ...Value) Value {
	if !b.check(op.String(), args...) {
		return Value{st: b.st, id: ir.NoValue}
	}
	ids := make([]ir.ValueID, len(args))
	for i, a := range args {
		ids[i] = a.id
	}
	id, err := b.st.g.Append(op, b.nameFor(op.String()), ids, at, callerPos())
	if err != nil {
		b.fail(err)
		return Value{st: b.st, id: ir.NoValue}
	}
	b.st.g.Value(id).Block = b.block
	return Value{st: b.st, id: id}
}

// check reports whether an op may run: no error yet, the builder still open, and every
// operand a valid value of this builder. Otherwise it records why and returns false.
func (b *Builder) check(what string, args ...Value) bool {
	st := b.st
	if st.err != nil {
		return false
	}
	if st.done {
		b.fail(ir.Errorf(callerPos(), "%s: the builder of %s is finished, Build was already called", what, st.g.Name))
		return false
	}
	for i, a := range args {
		switch {
		case a.st == nil:
			b.fail(ir.Errorf(callerPos(), "%s: operand %d is the zero Value, want a value made by this builder", what, i))
			return false
		case a.st != st:
			b.fail(ir.Errorf(callerPos(), "%s: operand %d was made by another builder", what, i))
			return false
		case a.id == ir.NoValue:
			// Only reachable if the error that made it was cleared, which cannot happen.
			panic("frontend: invalid value outlived its error")
		}
	}
	return true
}

func (b *Builder) fail(err error) {
	if b.st.err == nil {
		b.st.err = err
	}
}

// nameFor returns the name of the next value: the Named name or the op's name, under the
// scope prefix, made unique with a .N suffix if auto-generated.
func (b *Builder) nameFor(base string) string {
	if b.name != "" {
		return b.prefix + b.name
	}
	base = b.prefix + base
	g := b.st.g
	n := b.st.next[base]
	for {
		name := base
		if n > 0 {
			name = base + "." + strconv.Itoa(n)
		}
		n++
		if _, used := g.Lookup(name); !used {
			b.st.next[base] = n
			return name
		}
	}
}

// ID returns the value's id in the graph, or ir.NoValue for an invalid Value.
func (v Value) ID() ir.ValueID {
	if v.st == nil {
		return ir.NoValue
	}
	return v.id
}

// Valid reports whether v names a value of a graph.
func (v Value) Valid() bool { return v.st != nil && v.id != ir.NoValue }

// Type returns the value's dtype and shape, or the zero Type for an invalid Value.
func (v Value) Type() ir.Type {
	if !v.Valid() {
		return ir.Type{}
	}
	return v.st.g.Values[v.id].Type
}

// Shape returns the value's shape (nil for an invalid Value). The slice is the graph's own:
// do not modify it.
func (v Value) Shape() ir.Shape { return v.Type().Shape }

// DType returns the value's element type.
func (v Value) DType() ir.DType { return v.Type().DType }

// Name returns the value's name in the graph, or "" for an invalid Value.
func (v Value) Name() string {
	if !v.Valid() {
		return ""
	}
	return v.st.g.Values[v.id].Name
}

// Dim returns the size of dim i, counting from the end when i is negative (-1 is the last),
// or 0 when v is invalid or i out of range.
func (v Value) Dim(i int) int {
	s := v.Shape()
	if i < 0 {
		i += len(s)
	}
	if i < 0 || i >= len(s) {
		return 0
	}
	return s[i]
}

func (v Value) String() string {
	if !v.Valid() {
		return "<invalid>"
	}
	return fmt.Sprintf("%s: %s", v.Name(), v.Type())
}

// builderDir is this file's directory: frames from builder*.go files in it are the builder's
// own and are skipped when looking for the caller's position.
var builderDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}()

// callerPos returns the position of the first caller outside the builder's own files. Go
// reports no column, so the column is always 1.
//
// Every value records its position, so this runs once per op: resolving a PC to a file
// and line is most of a build's time, hence the cache by PC. One PC may stand for several
// frames (a builder method inlined into its caller), so the cache holds the outcome for the
// whole inline expansion.
func callerPos() ir.Pos {
	// Unwinding costs per frame, and the builder nests at most four deep (Apply, declare,
	// Param, caller), so try a short walk before the complete one.
	var buf [4]uintptr
	if p, ok := firstOutside(buf[:runtime.Callers(3, buf[:])]); ok {
		return p
	}
	more := make([]uintptr, 64)
	p, _ := firstOutside(more[:runtime.Callers(3, more)])
	return p
}

func firstOutside(pcs []uintptr) (ir.Pos, bool) {
	for _, pc := range pcs {
		c, ok := posCache.Load(pc)
		if !ok {
			c = resolvePC(pc)
			posCache.Store(pc, c)
		}
		if p := c.(cachedPos); p.outside {
			return p.pos, true
		}
	}
	return ir.Pos{}, false
}

// cachedPos is what one return PC resolves to: the first frame of its inline expansion
// outside the builder, if any.
type cachedPos struct {
	pos     ir.Pos
	outside bool
}

var posCache sync.Map // uintptr -> cachedPos

func resolvePC(pc uintptr) cachedPos {
	frames := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := frames.Next()
		if !isBuilderFile(f.File) {
			return cachedPos{ir.Pos{File: f.File, Line: f.Line, Col: 1}, true}
		}
		if !more {
			return cachedPos{}
		}
	}
}

func isBuilderFile(file string) bool {
	base := filepath.Base(file)
	return filepath.Dir(file) == builderDir && strings.HasPrefix(base, "builder") && !strings.HasSuffix(base, "_test.go")
}
