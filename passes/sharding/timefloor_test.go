package sharding

import (
	"context"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryBoundIsLower: MemoryBound's bounds on mlp-tiny on 2×2 at budgets
// from the free plan's peak down towards the least: Bound is at most the free optimum and
// Under at most the cost of lp_solve's plan under the budget (the objective counts every
// value's resharding once per layout, as Result.Cost does), and where the free plan does
// not fit the budget, Under is above the free optimum somewhere (the memory raised it), so
// a bound that ignored the memory would fail.
func TestMemoryBoundIsLower(t *testing.T) {
	_, lm := benchMesh(t, "dgx-a100", 2, 2)
	raised, checked := 0, 0
	for _, name := range []string{"mlp-tiny"} { // gpt-tiny: the root's TestLagDualIsLower
		g := tinyStep(t, name)
		base, free, least := boundBudgets(t, g, lm)
		for _, f := range []float64{0.6, 0.3, 0.1} {
			opts := base
			opts.MemoryBudget = least + int64(f*float64(free.PeakMemory-least))
			d, err := MemoryBound(context.Background(), g, lm, opts, 400)
			require.NoError(t, err)
			require.Zero(t, d.PerEdgeValues, name)
			assert.LessOrEqual(t, d.Bound, free.Cost.Total*(1+1e-9), "%s: free bound", name)
			assert.LessOrEqual(t, d.Bound, d.Under, name)
			res, err := Solve(context.Background(), g, lm, opts)
			if err != nil {
				continue
			}
			checked++
			assert.LessOrEqual(t, d.Under, res.Cost.Total*(1+1e-9), "%s at %d bytes: bound under the memory", name, opts.MemoryBudget)
			if d.Under > free.Cost.Total*(1+1e-9) {
				raised++
			}
			t.Logf("%s at %d bytes: free %.6g, under %.6g (fits %v), plan %.6g", name, opts.MemoryBudget, d.Bound, d.Under, d.Fits, res.Cost.Total)
		}
	}
	assert.Positive(t, checked)
	assert.Positive(t, raised, "the memory raised some bound")
}

// TestMemoryBoundUntilStops: a search told its target stops once its bound reaches it,
// with no more sweeps than the full search, and its bound stays under lp_solve's plan.
func TestMemoryBoundUntilStops(t *testing.T) {
	_, lm := benchMesh(t, "dgx-a100", 2, 2)
	g := tinyStep(t, "mlp-tiny")
	base, free, least := boundBudgets(t, g, lm)
	stopped := 0
	for _, f := range []float64{0.6, 0.3, 0.1} {
		opts := base
		opts.MemoryBudget = least + int64(f*float64(free.PeakMemory-least))
		full, err := MemoryBound(context.Background(), g, lm, opts, 400)
		require.NoError(t, err)
		if full.Under <= full.Bound {
			continue // the memory did not bind this bound: nothing to stop
		}
		target := full.Bound + 0.5*(full.Under-full.Bound)
		asked := 0
		d, err := MemoryBoundUntil(context.Background(), g, lm, opts, 400, 0, func(d MemoryDual) bool {
			asked++
			return d.Under >= target
		})
		require.NoError(t, err)
		assert.Positive(t, asked)
		assert.GreaterOrEqual(t, d.Under, target, "at %d bytes", opts.MemoryBudget)
		assert.LessOrEqual(t, d.Sweeps, full.Sweeps, "at %d bytes", opts.MemoryBudget)
		if d.Sweeps < full.Sweeps {
			stopped++
		}
		if res, err := Solve(context.Background(), g, lm, opts); err == nil {
			assert.LessOrEqual(t, d.Under, res.Cost.Total*(1+1e-9), "at %d bytes: bound under the memory", opts.MemoryBudget)
		}
		t.Logf("at %d bytes: free %.6g, target %.6g, under %.6g after %d sweeps (full: %.6g after %d)",
			opts.MemoryBudget, d.Bound, target, d.Under, d.Sweeps, full.Under, full.Sweeps)
	}
	assert.Positive(t, stopped, "some search stopped at its target")
}

// boundBudgets gives the options the memory-bound tests solve g on lm with, the free plan
// (no budget) and the least footprint of any plan (the MemoryError of a 1-byte budget):
// the tests' budgets lie between the two.
func boundBudgets(t *testing.T, g *ir.Graph, lm *mesh.LogicalMesh) (Options, *Result, int64) {
	t.Helper()
	base := Options{DeviceFLOPS: 1e9}
	free, err := Solve(context.Background(), g, lm, base)
	require.NoError(t, err)
	least := base
	least.MemoryBudget = 1
	_, err = Solve(context.Background(), g, lm, least)
	var me *MemoryError
	require.ErrorAs(t, err, &me)
	return base, free, me.Minimum
}
