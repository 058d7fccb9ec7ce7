package passes

import (
	"fmt"

	"github.com/autopar/autopar/ir"
)

// Grad differentiates the value loss of g with respect to each value of wrt (params, usually)
// by reverse mode, writing the backward ops into a copy of g through ir.Graph.Append. It
// returns that copy — g's values unchanged and in place, the backward ops after them — and
// grads[i], the ID of d loss / d wrt[i] in it, a value named "grad.<name of wrt[i]>" and
// marked ir.RoleGrad of wrt[i]. Every value it appends says what it is in its ir.Prov
// (adjoint, contribution, running sum, rule temporary, each with the forward value it
// belongs to); other packages read that, never the names below, which are for people.
//
// A non-scalar loss is differentiated as the sum of its elements. The adjoint of a forward
// value x (ir.RoleAdjoint) is named "d.x" (when x feeds several differentiated ops, their
// contributions are "d.x.1", "d.x.2", ..., summed with add in the order the sweep meets
// them, which is deterministic); temporaries a rule needs are "d.<value>.<what>". Only
// values on a path from some wrt to the loss get backward ops: a dead branch gets none, and
// a wrt the loss does not depend on gets a zero constant.
//
// Errors, positioned: loss or a wrt that is not a float value of g, a wrt listed twice, and
// a float the loss depends on that comes from a wrt through an op with no gradient
// ("grad: eq is not differentiable ..."). Grad runs in time linear in the size of g.
func Grad(g *ir.Graph, loss ir.ValueID, wrt []ir.ValueID) (*ir.Graph, []ir.ValueID, error) {
	if err := checkGradArgs(g, loss, wrt); err != nil {
		return nil, nil, err
	}
	an, err := analyze(g, loss, wrt)
	if err != nil {
		return nil, nil, err
	}
	out := g.Clone()
	s := newSweep(out, an, wrt)
	grads := s.run(loss, wrt)
	// Renaming contributions to "d.x" left the graph's name index stale; a clone rebuilds it.
	return out.Clone(), grads, nil
}

func checkGradArgs(g *ir.Graph, loss ir.ValueID, wrt []ir.ValueID) error {
	valid := func(id ir.ValueID) bool { return id >= 0 && int(id) < len(g.Values) }
	if !valid(loss) {
		return fmt.Errorf("grad: loss %d is not a value of graph %s", loss, g.Name)
	}
	if l := g.Value(loss); !l.Type.DType.IsFloat() {
		return ir.Errorf(l.Pos, "grad: loss %s must be a float tensor, is %s", l.Name, l.Type)
	}
	seen := make(map[ir.ValueID]bool, len(wrt))
	for _, w := range wrt {
		if !valid(w) {
			return fmt.Errorf("grad: wrt value %d is not a value of graph %s", w, g.Name)
		}
		v := g.Value(w)
		if !v.Type.DType.IsFloat() {
			return ir.Errorf(v.Pos, "grad: cannot differentiate with respect to %s: it is %s, not a float tensor", v.Name, v.Type)
		}
		if seen[w] {
			return ir.Errorf(v.Pos, "grad: %s is listed twice among the values to differentiate with respect to", v.Name)
		}
		seen[w] = true
	}
	return nil
}

// analysis says which values the backward pass touches; every slice is indexed by ValueID.
type analysis struct {
	// from is the index in wrt of a requested value this value depends on (the smallest),
	// or -1: the forward half of "on a path from wrt to the loss".
	from []int32
	// needed marks values the loss depends on through differentiable float edges: the
	// backward half.
	needed []bool
	// uses counts the gradient contributions each active value will receive.
	uses []int32
}

func (an *analysis) active(id ir.ValueID) bool { return an.needed[id] && an.from[id] >= 0 }

// analyze computes the active set in two linear sweeps and reports a non-differentiable use
// on a path from a wrt to the loss.
func analyze(g *ir.Graph, loss ir.ValueID, wrt []ir.ValueID) (*analysis, error) {
	n := len(g.Values)
	an := &analysis{from: make([]int32, n), needed: make([]bool, n), uses: make([]int32, n)}
	for i := range an.from {
		an.from[i] = -1
	}
	for k, w := range wrt {
		an.from[w] = int32(k)
	}
	for i := range g.Values {
		for _, a := range g.Values[i].Args {
			if f := an.from[a]; f >= 0 && (an.from[i] < 0 || f < an.from[i]) {
				an.from[i] = f
			}
		}
	}
	an.needed[loss] = true
	for i := loss; i >= 0; i-- {
		if !an.needed[i] {
			continue
		}
		if err := an.propagate(g, i, loss, wrt); err != nil {
			return nil, err
		}
	}
	for i := range g.Values {
		if !an.active(ir.ValueID(i)) {
			continue
		}
		for j, a := range g.Values[i].Args {
			if differentiableEdge(g, ir.ValueID(i), j) && an.active(a) {
				an.uses[a]++
			}
		}
	}
	return an, nil
}

// propagate marks the operands of the needed value id that the loss depends on through
// floats, and fails when such a dependence on a wrt crosses an op with no gradient.
func (an *analysis) propagate(g *ir.Graph, id, loss ir.ValueID, wrt []ir.ValueID) error {
	v := g.Value(id)
	rule, ok := gradRules[v.Op]
	for j, a := range v.Args {
		switch {
		case ok && rule.isDiscrete(j):
			// A condition, index or label: no gradient by design.
		case ok && g.Values[a].Type.DType.IsFloat():
			an.needed[a] = true
		case an.from[a] >= 0:
			return notDifferentiable(g, id, a, !ok, loss, wrt[an.from[a]])
		}
	}
	return nil
}

// notDifferentiable blames the op that breaks the float path: user itself when it has no
// gradient rule, else the producer of its non-float operand (the compare behind a cast).
func notDifferentiable(g *ir.Graph, user, arg ir.ValueID, userHasNoRule bool, loss, w ir.ValueID) error {
	blame, at := arg, user
	if userHasNoRule {
		blame = user
	}
	b, u := g.Value(blame), g.Value(at)
	e := ir.Errorf(b.Pos, "grad: %s is not differentiable (used at %s on the path from %s to %s)",
		b.Op, u.Pos, g.Value(w).Name, g.Value(loss).Name)
	if blame != at {
		e = e.WithNote(u.Pos, "%s = %s uses %s, of type %s, here", u.Name, u.Op, b.Name, b.Type)
	}
	return e
}

// differentiableEdge reports whether operand j of value id carries a gradient: id has a
// rule, slot j is not discrete, and both ends are floats.
func differentiableEdge(g *ir.Graph, id ir.ValueID, j int) bool {
	v := &g.Values[id]
	rule, ok := gradRules[v.Op]
	return ok && !rule.isDiscrete(j) && v.Type.DType.IsFloat() && g.Values[v.Args[j]].Type.DType.IsFloat()
}

// Differentiable reports whether op has a gradient rule.
func Differentiable(op ir.Op) bool {
	_, ok := gradRules[op]
	return ok
}
