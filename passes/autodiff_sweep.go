package passes

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// builder appends the backward ops. It names them itself rather than through
// ir.Graph.FreshName because the sweep renames contributions ("d.x") after they are built,
// which the graph's name index does not see; Grad rebuilds that index at the end.
type builder struct {
	g *ir.Graph
	// pos is the position of the forward value whose rule is running: its backward ops
	// point back at it.
	pos ir.Pos
	// prov is the provenance of what emit appends (the rule's forward value, the param
	// being updated); shared is that of the constants scalar makes, which any rule reuses.
	prov, shared ir.Prov
	taken        map[string]bool
	consts       map[constKey]ir.ValueID
}

type constKey struct {
	dt   ir.DType
	bits uint64
}

func newBuilder(g *ir.Graph) *builder {
	shared := ir.RoleOf(ir.RoleBackward, ir.NoValue)
	return &builder{g: g, prov: shared, shared: shared, taken: map[string]bool{}, consts: map[constKey]ir.ValueID{}}
}

// fresh returns base, or base.1, base.2, ... if taken, and reserves it.
func (b *builder) fresh(base string) string {
	name := base
	for k := 1; b.used(name); k++ {
		name = base + "." + strconv.Itoa(k)
	}
	b.taken[name] = true
	return name
}

func (b *builder) used(name string) bool {
	if b.taken[name] {
		return true
	}
	_, ok := b.g.Lookup(name)
	return ok
}

// emit appends one op under a fresh name based on base, with provenance b.prov, in the
// block of the value b.prov is relative to (ir.Graph.SetDerived). The rules
// build only well-typed ops, so a failure is a bug in a rule: it panics.
func (b *builder) emit(base string, op ir.Op, at ir.Attrs, args ...ir.ValueID) ir.ValueID {
	id, err := b.g.Append(op, b.fresh(base), args, at, b.pos)
	if err != nil {
		panic(fmt.Sprintf("passes: gradient rule built an invalid %s: %v", op, err))
	}
	b.g.SetDerived(id, b.prov)
	return id
}

// emitAs is emit with provenance p.
func (b *builder) emitAs(p ir.Prov, base string, op ir.Op, at ir.Attrs, args ...ir.ValueID) ir.ValueID {
	keep := b.prov
	b.prov = p
	defer func() { b.prov = keep }()
	return b.emit(base, op, at, args...)
}

// scalar returns a scalar constant of dtype dt, one per (dtype, value) for the whole graph.
func (b *builder) scalar(dt ir.DType, v float64) ir.ValueID {
	key := constKey{dt, math.Float64bits(v)}
	if id, ok := b.consts[key]; ok {
		return id
	}
	s := strconv.FormatFloat(v, 'g', -1, 64)
	s = strings.NewReplacer("-", "n", "+", "").Replace(s)
	pos := b.pos
	b.pos = ir.Pos{}
	id := b.emitAs(b.shared, "k."+dt.String()+"."+s, ir.OpConstant, ir.Attrs{}.With("value", v).With("type", ir.Type{DType: dt}))
	b.pos = pos
	b.consts[key] = id
	return id
}

// filled returns a new constant tensor of type t.
func (b *builder) filled(base string, t ir.Type, v float64) ir.ValueID {
	return b.emit(base, ir.OpConstant, ir.Attrs{}.With("value", v).With("type", t))
}

// rename gives a value the sweep built a readable name and says what it now is: a
// contribution to x's adjoint moves to x's block.
func (b *builder) rename(id ir.ValueID, base string, p ir.Prov) {
	b.g.Values[id].Name = b.fresh(base)
	b.g.SetDerived(id, p)
}

// sweep is one reverse pass over the active values, from the loss down.
type sweep struct {
	b   *builder
	an  *analysis
	wrt map[ir.ValueID]bool
	// contribs[x] are the gradient contributions to x, in the order they were made.
	contribs [][]ir.ValueID
	// adj[x] is the adjoint of x once the sweep has passed it.
	adj []ir.ValueID
	// owner[c] is the value a renamed contribution c was named after; named[x] counts the
	// contributions to x named d.x.k so far.
	owner map[ir.ValueID]ir.ValueID
	named map[ir.ValueID]int
}

func newSweep(g *ir.Graph, an *analysis, wrt []ir.ValueID) *sweep {
	n := len(g.Values)
	s := &sweep{b: newBuilder(g), an: an, wrt: make(map[ir.ValueID]bool, len(wrt)),
		contribs: make([][]ir.ValueID, n), adj: make([]ir.ValueID, n), owner: map[ir.ValueID]ir.ValueID{}, named: map[ir.ValueID]int{}}
	for _, w := range wrt {
		s.wrt[w] = true
	}
	for i := range s.adj {
		s.adj[i] = ir.NoValue
	}
	return s
}

// adjName is the name of x's finished adjoint: grad.x for a requested value, d.x otherwise.
func (s *sweep) adjName(x ir.ValueID) string {
	if s.wrt[x] {
		return "grad." + s.b.g.Values[x].Name
	}
	return "d." + s.b.g.Values[x].Name
}

// adjRole is the provenance of x's finished adjoint: the gradient of a requested value, the
// adjoint of any other.
func (s *sweep) adjRole(x ir.ValueID) ir.Prov {
	if s.wrt[x] {
		return ir.RoleOf(ir.RoleGrad, x)
	}
	return ir.RoleOf(ir.RoleAdjoint, x)
}

// run sweeps from the loss down and returns the gradient of each wrt, in order.
func (s *sweep) run(loss ir.ValueID, wrt []ir.ValueID) []ir.ValueID {
	g := s.b.g
	for i := loss; i >= 0; i-- {
		if !s.an.active(i) {
			continue
		}
		var dy ir.ValueID
		if i == loss {
			s.b.pos = g.Values[i].Pos
			s.b.prov = s.adjRole(i)
			dy = s.b.filled(s.adjName(i), g.Values[i].Type, 1)
		} else {
			dy = s.finish(i)
		}
		s.adj[i] = dy
		s.backward(i, dy)
	}
	grads := make([]ir.ValueID, len(wrt))
	for k, w := range wrt {
		grads[k] = s.adj[w]
		if grads[k] == ir.NoValue {
			s.b.pos = g.Values[w].Pos
			s.b.prov = s.adjRole(w)
			grads[k] = s.b.filled(s.adjName(w), g.Values[w].Type, 0)
		}
	}
	return grads
}

// backward runs the rule of value id with adjoint dy and records its contributions.
func (s *sweep) backward(id, dy ir.ValueID) {
	g := s.b.g
	v := g.Values[id] // a copy: Append may move the slice
	need := make([]bool, len(v.Args))
	any := false
	for j, a := range v.Args {
		need[j] = differentiableEdge(g, id, j) && s.an.active(a)
		any = any || need[j]
	}
	if !any {
		return
	}
	mark := ir.ValueID(len(g.Values))
	s.b.pos = v.Pos
	s.b.prov = ir.RoleOf(ir.RoleBackward, id)
	c := &gctx{b: s.b, y: id, v: v, dy: dy, need: need}
	out := gradRules[v.Op].fn(c)
	for j, a := range v.Args {
		if !need[j] {
			continue
		}
		if j >= len(out) || out[j] == ir.NoValue {
			panic(fmt.Sprintf("passes: the %s gradient rule made no gradient for operand %d", v.Op, j))
		}
		s.contribute(a, out[j], mark)
	}
}

// contribute records cv as a gradient contribution to x. A value the rule just built is
// renamed after x: d.x when it is x's only contribution, d.x.k otherwise.
func (s *sweep) contribute(x, cv, mark ir.ValueID) {
	if _, done := s.owner[cv]; cv >= mark && !done {
		s.owner[cv] = x
		if s.an.uses[x] == 1 {
			s.b.rename(cv, s.adjName(x), s.adjRole(x))
		} else {
			s.named[x]++
			s.b.rename(cv, fmt.Sprintf("d.%s.%d", s.b.g.Values[x].Name, s.named[x]), ir.RoleOf(ir.RoleAdjointPart, x))
		}
	}
	s.contribs[x] = append(s.contribs[x], cv)
}

func (s *sweep) owns(x, c ir.ValueID) bool {
	o, ok := s.owner[c]
	return ok && o == x
}

// finish sums the contributions to x into its adjoint.
func (s *sweep) finish(x ir.ValueID) ir.ValueID {
	cs := s.contribs[x]
	s.contribs[x] = nil
	s.b.pos = s.b.g.Values[x].Pos
	switch {
	case len(cs) == 0:
		panic(fmt.Sprintf("passes: active value %s got no gradient", s.b.g.Values[x].Name))
	case len(cs) == 1 && s.wrt[x] && !s.owns(x, cs[0]):
		// A gradient that passes straight through (grad of add) still gets its own name:
		// an identity cast.
		dt := s.b.g.Values[x].Type.DType
		return s.b.emitAs(s.adjRole(x), s.adjName(x), ir.OpCast, ir.Attrs{}.With("to", dt), cs[0])
	case len(cs) == 1:
		return cs[0]
	}
	acc := cs[0]
	for k, c := range cs[1:] {
		name, p := s.adjName(x), s.adjRole(x)
		if k < len(cs)-2 {
			name, p = fmt.Sprintf("d.%s.sum%d", s.b.g.Values[x].Name, k+2), ir.RoleOf(ir.RoleAdjointSum, x)
		}
		acc = s.b.emitAs(p, name, ir.OpAdd, nil, acc, c)
	}
	return acc
}
