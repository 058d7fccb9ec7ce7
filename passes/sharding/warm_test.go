package sharding

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

// Re-solves of real stage ILPs (MLP training steps on 1×4 and 2×2 meshes) under other
// memory budgets, each started from the last solve's basis, find plans of the cost a cold
// solve proves optimal, within the budget. Rebuilt under the budget it was solved with, an
// ILP needs no simplex iteration from its own basis: the basis lands on the rows and
// variables it came from.
func TestWarmStartSameOptimum(t *testing.T) {
	var mu sync.Mutex
	var trace []ilp.Stats
	defer ilp.Trace(func(_ *ilp.Problem, st ilp.Stats) {
		mu.Lock()
		trace = append(trace, st)
		mu.Unlock()
	})()
	ctx := context.Background()
	for _, tc := range []struct {
		batch, hidden, layers, n0, n1 int
		fractions                     []float64
	}{
		{1024, 256, 2, 1, 4, []float64{1.5, 0.9, 0.7, 0.5, 0.3, 0.1}},
		{512, 128, 3, 2, 2, []float64{1.5, 0.9, 0.3}},
	} {
		g, lm := mlpStep(t, tc.batch, tc.hidden, tc.layers), uniform(t, tc.n0, tc.n1)
		opts := Options{AlpaCompute: true, LPSolveOnly: true} // lp_solve's warm starts
		free, err := Solve(ctx, g, lm, opts)
		require.NoError(t, err)
		opts.MemoryBudget = 1
		_, err = Solve(ctx, g, lm, opts)
		var me *MemoryError
		require.True(t, errors.As(err, &me), "got %v", err)
		lo, hi := float64(me.Minimum), float64(free.PeakMemory)
		require.Less(t, lo, hi)

		last := free
		for i, f := range tc.fractions {
			budget := int64(lo + f*(hi-lo))
			opts.MemoryBudget, opts.WarmStart = budget, nil
			cold, err := Solve(ctx, g, lm, opts)
			require.NoError(t, err, "budget %d", budget)
			opts.WarmStart = last
			trace = nil
			warm, err := Solve(ctx, g, lm, opts)
			require.NoError(t, err, "budget %d", budget)
			require.NotEmpty(t, trace)
			assert.True(t, trace[0].Warm, "budget %d", budget)
			assert.LessOrEqual(t, warm.PeakMemory, budget)
			assert.InDelta(t, cold.ILP.Objective, warm.ILP.Objective, 1e-9*math.Abs(cold.ILP.Objective), "budget %d", budget)
			assert.Equal(t, cold.ILP.Variables, warm.ILP.Variables)
			repeat, err := Solve(ctx, g, lm, opts)
			require.NoError(t, err)
			assert.Equal(t, warm.Specs, repeat.Specs, "a warm start is deterministic")
			if i == 0 {
				opts.WarmStart = warm
				trace = nil
				again, err := Solve(ctx, g, lm, opts)
				require.NoError(t, err)
				assert.Zero(t, trace[0].Iterations, "the rebuilt ILP starts at its own optimal basis")
				assert.Equal(t, warm.Specs, again.Specs)
			}
			if warm.warm != nil {
				last = warm
			}
		}
	}
}
