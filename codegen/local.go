package codegen

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Local lowering: how one op of the step runs on the local shards of a strategy.
//
// The contract (shared with passes/sharding): for an op with dims signature d, a strategy
// gives each label a set of mesh axes. Operand i's spec has, on dim k, the axes of label
// d.Operands[i][k]; the result's dim k has the axes of d.Result[k]; the result is partial
// (a sum still to be reduced) over the axes of the contracted labels. A dim whose label is
// -1 is not split. Running the same op on the local shards then gives the local shard of
// the result, or its partial sum, except where this file says otherwise:
//
//   - attributes that spell a shape (reshape, broadcast and the pooling and convolution
//     gradients' "shape", constant and iota's "type", slice's "limit" on a kept dim) are
//     rewritten to the local shapes;
//   - reduce_mean over a split axis: the local mean times local/global count, then partial;
//   - iota: computed as cumsum of ones minus ones, plus the shard's offset along the axis
//     when that axis is split (the instruction set has no compute without operands);
//   - constant: a constant instruction of the local type;
//   - gather with its table's rows split: a masked lookup at the shard's row offset, zeros
//     for the ids other shards hold, partial (a sum) over the rows' axes (gatherShard).
//
// What cannot be lowered is refused by CheckStrategy, naming the op, the strategy and why:
// a fixed label that is split (softmax's row, a cut slice dim, gather's vocabulary, cross
// entropy's classes, any dim of dropout, whose mask depends on the global element index),
// a split contracted label of an op whose row's Partial is not lowerable (reduce_max;
// ir.Partial.Lowerable, which the sharding pass reads too). The sharding pass reads the same
// row and signature, so it offers none of these.

// CheckStrategy reports whether Lower can run value id of g with operand layouts in and
// result layout out on mesh m, and if not, why: the error names the op, the strategy and
// the reason. Every candidate the sharding pass offers passes it (TestCandidatesLower in the
// root package checks it). Leaves (param, input, state) take no operand layouts; their out
// layout is how they are stored (inputs: loaded).
func CheckStrategy(g *ir.Graph, id ir.ValueID, in []mesh.Spec, out mesh.Spec, m *mesh.LogicalMesh) error {
	v := g.Value(id)
	fail := func(format string, args ...any) error {
		return ir.Errorf(v.Pos, "codegen: %s = %s with strategy %s: %s", v.Name, v.Op,
			strategyName(in, out), fmt.Sprintf(format, args...))
	}
	if len(in) != len(v.Args) {
		return fail("%d operand layouts, expected %d", len(in), len(v.Args))
	}
	if _, err := m.LocalShape(v.Type.Shape, out); err != nil {
		return fail("result layout: %v", err)
	}
	for i, a := range v.Args {
		if _, err := m.LocalShape(g.Value(a).Type.Shape, in[i]); err != nil {
			return fail("operand %d layout: %v", i, err)
		}
		if in[i].Partial != 0 {
			return fail("operand %d layout is partial, expected a reduced layout", i)
		}
	}
	if v.Op.IsLeaf() {
		if out.Partial != 0 {
			return fail("a %s cannot be stored partial", v.Op)
		}
		return nil
	}
	if err := checkLabels(g, id, in, out); err != nil {
		return fail("%v", err)
	}
	if _, err := localType(g, id, in, out, m); err != nil {
		return fail("%v", err)
	}
	return nil
}

// labelAxes derives each label's mesh axes from the layouts, checking that every place a
// label appears agrees and that unlabelled dims are not split.
func labelAxes(d ir.Dims, in []mesh.Spec, out mesh.Spec) ([]mesh.AxisSet, error) {
	axes := make([]mesh.AxisSet, d.NumLabels())
	seen := make([]bool, d.NumLabels())
	visit := func(what string, labels []int, s mesh.Spec) error {
		for k, l := range labels {
			if l < 0 {
				if s.Dims[k] != mesh.AxesNone {
					return fmt.Errorf("%s dim %d takes part in no label and cannot be split", what, k)
				}
				continue
			}
			if seen[l] && axes[l] != s.Dims[k] {
				return fmt.Errorf("%s dim %d is %s but the same label is %s elsewhere", what, k, s.Dims[k], axes[l])
			}
			axes[l], seen[l] = s.Dims[k], true
		}
		return nil
	}
	for i, ls := range d.Operands {
		if err := visit(fmt.Sprintf("operand %d", i), ls, in[i]); err != nil {
			return nil, err
		}
	}
	if err := visit("result", d.Result, out); err != nil {
		return nil, err
	}
	return axes, nil
}

// checkLabels checks the strategy against the op's dims signature.
func checkLabels(g *ir.Graph, id ir.ValueID, in []mesh.Spec, out mesh.Spec) error {
	v := g.Value(id)
	d := g.Dims(id)
	axes, err := labelAxes(d, in, out)
	if err != nil {
		return err
	}
	for l, a := range axes {
		if a != 0 && d.Fixed[l] && v.Op != ir.OpIota {
			return fmt.Errorf("label %d of %s is fixed (the op needs it whole) but is split on %s", l, d, a)
		}
	}
	var partial mesh.AxisSet
	for _, l := range d.Contracted() {
		partial |= axes[l]
	}
	if p := v.Op.Def().Partial; partial != 0 && !p.Lowerable() {
		return fmt.Errorf("splitting a contracted dim of %s on %s leaves a partial (%s) that the collectives cannot finish", v.Op, partial, p)
	}
	if partial != out.Partial {
		return fmt.Errorf("result is partial on %q, expected %q (the axes of the split contracted dims)",
			out.Partial.Digits(), partial.Digits())
	}
	return nil
}

// localType runs the op's shape rule on the local operand types with the local attributes
// and checks that it gives the local shard of the result.
func localType(g *ir.Graph, id ir.ValueID, in []mesh.Spec, out mesh.Spec, m *mesh.LogicalMesh) (ir.Type, error) {
	v := g.Value(id)
	want := localOf(m, v.Type, out)
	if len(v.Args) == 0 {
		return want, nil
	}
	args := make([]ir.Arg, len(v.Args))
	for i, a := range v.Args {
		av := g.Value(a)
		args[i] = ir.Arg{Name: av.Name, Type: localOf(m, av.Type, in[i])}
	}
	got, _, err := ir.InferType(v.Op, args, localAttrs(v, want))
	if err != nil {
		return ir.Type{}, fmt.Errorf("on local shards: %v", err)
	}
	if !got.Equal(want) {
		return ir.Type{}, fmt.Errorf("on local shards gives %s, expected the result's shard %s", got, want)
	}
	return want, nil
}

// localOf returns the type of one device's block of a tensor of type t laid out as s. It
// panics if s does not divide t: callers have checked the strategy.
func localOf(m *mesh.LogicalMesh, t ir.Type, s mesh.Spec) ir.Type {
	shape, err := m.LocalShape(t.Shape, s)
	if err != nil {
		panic("codegen: local shape of an unchecked layout: " + err.Error())
	}
	return ir.Type{DType: t.DType, Shape: shape}
}

// localAttrs rewrites the attributes of v that spell its result's shape to the local
// result type.
func localAttrs(v *ir.Value, local ir.Type) ir.Attrs {
	at := v.Attrs
	if _, ok := at.Get("shape"); ok {
		at = at.With("shape", []int(local.Shape.Clone()))
	}
	if _, ok := at.Get("type"); ok {
		at = at.With("type", local)
	}
	if v.Op == ir.OpSlice {
		start, limit := at.Ints("start"), slices.Clone(at.Ints("limit"))
		for k := range limit {
			if limit[k]-start[k] == v.Type.Shape[k] {
				limit[k] = start[k] + local.Shape[k]
			}
		}
		at = at.With("limit", limit)
	}
	return at
}

// strategyName writes a strategy as the sharding pass names it: "RS1 = RR x RS1".
func strategyName(in []mesh.Spec, out mesh.Spec) string {
	name := specText(out)
	for i, s := range in {
		sep := " x "
		if i == 0 {
			sep = " = "
		}
		name += sep + specText(s)
	}
	return name
}

func specText(s mesh.Spec) string {
	if t := s.String(); t != "" {
		return t
	}
	return "-"
}
