package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
)

// TestLayersOnceGap: tying identical layers shrinks the ILP, and its plan is priced exactly
// (its ILP objective equals the plan's cost, recomputed value by value). Its optimum is at
// least the joint one. The gap depends on what a "layer" is: an MLP whose layers are single
// matmuls wants Megatron's column/row alternation, a period of two layers, so tying each
// layer to the next costs 50% (logged, the known gap); tying pairs of layers (blocks of two
// matmuls), the unit a transformer block already is, closes it.
func TestLayersOnceGap(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		batch, hidden, layers int
		n0, n1                int
		pairs                 bool    // one tied layer = two MLP layers
		maxGap                float64 // relative
	}{
		{"mlp dp 1x4", 1024, 128, 6, 1, 4, false, 1e-9},
		{"mlp megatron 1x4, layer = 1 matmul", 32, 1024, 6, 1, 4, false, 1},
		{"mlp megatron 1x4, layer = 2 matmuls", 32, 1024, 6, 1, 4, true, 1e-9},
		{"mlp 2x2, layer = 2 matmuls", 256, 256, 6, 2, 2, true, 0.05}, // measured 4.8%: the end layers differ,
	} {
		g := mlpStep(t, tc.batch, tc.hidden, tc.layers)
		lm := uniform(t, tc.n0, tc.n1)
		joint, err := Solve(context.Background(), g, lm, Options{AlpaCompute: true})
		require.NoError(t, err)
		opts := Options{AlpaCompute: true, SolveLayersOnce: true}
		if tc.pairs {
			for id := range g.Values {
				if b := g.Values[id].Block; b != ir.NoBlock {
					g.Values[id].Block = (b + 1) / 2
				}
			}
		}
		p, err := newPlanner(g, lm, opts)
		require.NoError(t, err)
		tied, err := p.solve(context.Background())
		require.NoError(t, err)
		ev := ilp.Evaluate(p.prob, solutionOf(t, p, tied))
		require.NoError(t, ev.Err(), tc.name)
		assert.InDelta(t, tied.Cost.Total, ev.Objective, 1e-6*tied.Cost.Total, tc.name)
		assert.Positive(t, tied.ILP.TiedGroups, tc.name)
		assert.Less(t, tied.ILP.Variables, joint.ILP.Variables, tc.name)
		assert.GreaterOrEqual(t, tied.Cost.Total, joint.Cost.Total*(1-1e-9), "%s: tying only restricts", tc.name)
		gap := tied.Cost.Total/joint.Cost.Total - 1
		assert.LessOrEqual(t, gap, tc.maxGap, tc.name)
		t.Logf("%s: joint %.6g (%d vars), tied %.6g (%d vars, %d tied groups), gap %.3g%%",
			tc.name, joint.Cost.Total, joint.ILP.Variables, tied.Cost.Total, tied.ILP.Variables, tied.ILP.TiedGroups, 100*gap)
	}
}
