package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// TestReshardOncePerLayout: a value two consumers (in two groups) read in the same other
// layout is resharded once, in the plan's collectives, its cost and the ILP's objective;
// a third consumer wanting yet another layout adds one more resharding. It is the GShard
// pattern: the tokens dispatched to the experts are read by the expert matmul and by its
// weight gradient, both split by expert, from one all-to-all.
func TestReshardOncePerLayout(t *testing.T) {
	b := newGB(t, "shared")
	x := b.input("x", 16, 16)
	a := b.op(ir.OpRelu, "a", nil, x)
	c1 := b.op(ir.OpMatMul, "c1", nil, a, b.param("w1", 16, 16))
	c2 := b.op(ir.OpMatMul, "c2", nil, a, b.param("w2", 16, 16))
	c3 := b.op(ir.OpMatMul, "c3", nil, a, b.param("w3", 16, 16))
	sum := b.op(ir.OpAdd, "s", nil, c1, c2)
	b.g.AddOutput(b.op(ir.OpAdd, "out", nil, sum, c3), ir.Pos{})
	require.NoError(t, ir.Verify(b.g))
	lm := uniform(t, 1, 4)
	rows := mesh.Spec{Dims: []mesh.AxisSet{mesh.Axis1, mesh.AxesNone}} // a split by rows
	cols := mesh.Spec{Dims: []mesh.AxisSet{mesh.AxesNone, mesh.Axis1}} // wanted split by columns
	opts := Options{DeviceFLOPS: 1, NoMerge: true}
	cands, err := CandidatesWith(b.g, lm, opts)
	require.NoError(t, err)
	wanting := func(v ir.ValueID, in mesh.Spec) int {
		for k, s := range cands[v] {
			if s.In[0].Equal(in) {
				return k
			}
		}
		t.Fatalf("no strategy of %s reads its operand as %s", b.g.Value(v).Name, in)
		return -1
	}
	for _, tc := range []struct {
		name  string
		third mesh.Spec
		want  int
	}{
		{"two consumers, one layout", rows, 1},
		{"and a third in another", mesh.Spec{Dims: []mesh.AxisSet{mesh.AxesNone, mesh.AxesNone}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			o.ForceSpec = map[ir.ValueID]mesh.Spec{a: rows}
			o.Force = map[ir.ValueID]int{c1: wanting(c1, cols), c2: wanting(c2, cols), c3: wanting(c3, tc.third)}
			if tc.third.Equal(rows) {
				o.Force[c3] = wanting(c3, rows) // reads a as it is: no resharding
			}
			p, err := newPlanner(b.g, lm, o)
			require.NoError(t, err)
			r, err := p.solve(context.Background())
			require.NoError(t, err)
			n, cost := 0, 0.0
			for _, c := range r.Collectives {
				if c.Value == a {
					n++
					cost += c.Time
				}
			}
			assert.Equal(t, tc.want, n, "reshardings of a: %+v", r.Collectives)
			one, err := mesh.ReshardCost(lm, b.g.Value(a).Type.Shape, 4, rows, cols)
			require.NoError(t, err)
			assert.Equal(t, mesh.AllToAll, one.Steps[0].Kind)
			assert.Greater(t, cost, 0.0)
			if tc.want == 1 {
				assert.InDelta(t, one.Time, cost, 1e-12, "a's all-to-all priced once")
			}
			assert.InDelta(t, r.Cost.Total, r.ILP.Objective, 1e-9*r.Cost.Total, "the ILP prices what the plan counts")
			ev := ilp.Evaluate(p.prob, solutionOf(t, p, r))
			require.NoError(t, ev.Err())
			assert.InDelta(t, r.Cost.Total, ev.Objective, 1e-9*r.Cost.Total)
		})
	}
}
