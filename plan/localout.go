package plan

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// The sharding pass and codegen describe an op's result at two moments. A sharding
// strategy's Out is the layout once the op's own collective (the all-reduce or
// reduce-scatter of a split contracted dim) is done, never partial; codegen's Stage.Out is
// the layout the local compute leaves, partial over those axes, and codegen inserts the
// collective itself as a resharding towards each consumer. LocalOut converts the first into
// the second; every strategy the sharding pass offers, converted, passes
// codegen.CheckStrategy (TestCandidatesLower in the root package), since both read the op's
// row of the ir op table.

// LocalOut is the layout the local compute of op id leaves under operand layouts in: each
// result dim split as its label is split in the operands, partial over the axes of split
// contracted labels. A result label no operand carries keeps its axes from out, less the
// partial axes (a reduce-scatter onto a dim no operand has: conv's spatial dims,
// scatter_add's rows).
func LocalOut(g *ir.Graph, id ir.ValueID, in []mesh.Spec, out mesh.Spec) mesh.Spec {
	v := g.Value(id)
	if len(v.Args) == 0 || len(in) != len(v.Args) {
		return out
	}
	d := g.Dims(id)
	axes := make([]mesh.AxisSet, d.NumLabels())
	seen := make([]bool, d.NumLabels())
	for i, labels := range d.Operands {
		for k, l := range labels {
			if l >= 0 && k < len(in[i].Dims) {
				axes[l] |= in[i].Dims[k]
				seen[l] = true
			}
		}
	}
	res := mesh.Spec{Dims: make([]mesh.AxisSet, len(d.Result))}
	for _, l := range d.Contracted() {
		res.Partial |= axes[l]
	}
	for k, l := range d.Result {
		switch {
		case l >= 0 && seen[l]:
			res.Dims[k] = axes[l]
		case k < len(out.Dims):
			// The axes of a reduce-scatter onto this dim are the collective's, which codegen
			// inserts after the local compute: they are partial here.
			res.Dims[k] = out.Dims[k] &^ res.Partial
		}
	}
	return res
}
