package sharding

import (
	"context"
	"fmt"
	"testing"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryBoundIsLower: MemoryBound's bounds on mlp-tiny on 2×2 and on a pipeline
// stage's graph (wresnet-tiny's layers [1,3) of 4 at B = 4, as the root cuts it; bare
// options on cpu 1×2) at budgets from just under the free plan's peak down towards the
// least: Bound is at most the free optimum, Under at most lp_solve's objective under the
// budget (the Lagrangian's own claim) and at most the price of its plan (Result.Cost,
// every value's resharding once per layout: what the root's floors compare it with), and
// where the free plan does not fit the budget, Under is above the free optimum somewhere
// (the memory raised it), so a bound that ignored the memory would fail. The stage at
// 429,334 bytes is where pipe found Under 0.175 % over the plan's price (DECISIONS, "Round
// eleven, lagfix"): the ILP's objective then priced that plan above Result.Cost, and Under
// bounds the objective; since objcost the objective MemoryBound weighs is the price.
func TestMemoryBoundIsLower(t *testing.T) {
	raised, checked, priced := 0, 0, 0
	for _, name := range []string{"mlp-tiny", "stage"} { // gpt-tiny: the root's TestLagDualIsLower
		var g *ir.Graph
		var lm *mesh.LogicalMesh
		base := Options{DeviceFLOPS: 1e9}
		if name == "stage" {
			var c *mesh.Cluster
			g, c, lm = wresnetStage(t)
			base = Options{Cluster: c} // as pipe found it: bare options
		} else {
			_, lm = benchMesh(t, "dgx-a100", 2, 2)
			g = tinyStep(t, name)
		}
		free, least := budgetsWith(t, g, lm, base)
		for _, f := range []float64{0.999, 0.9, 0.6, 0.3, 0.1} {
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
			at := fmt.Sprintf("%s at %d bytes", name, opts.MemoryBudget)
			if res.PeakMemory <= opts.MemoryBudget { // not a least-footprint fallback
				assert.LessOrEqual(t, d.Under, res.ILP.Objective*(1+1e-9), "%s: bound over its ILP's objective at a plan that fits", at)
			}
			// MemoryBound prices every value once per layout, so its energy is the price
			// (round eleven, objcost) and Under bounds the price of every plan that fits,
			// also where Solve's own pricing (inputs per consumer, the largest values per
			// edge) puts the plan's objective above its price.
			if res.PeakMemory <= opts.MemoryBudget {
				assert.LessOrEqual(t, d.Under, res.Cost.Total*(1+1e-9), "%s: bound over the plan's price", at)
				priced++
			}
			if d.Under > free.Cost.Total*(1+1e-9) {
				raised++
			}
			t.Logf("%s: free %.9g, under %.9g (fits %v), plan %.9g (objective %.9g, %s %s, peak %d)", at, d.Bound, d.Under, d.Fits, res.Cost.Total, res.ILP.Objective, res.ILP.Solver, res.ILP.Status, res.PeakMemory)
		}
	}
	assert.Positive(t, checked)
	assert.Positive(t, priced)
	assert.Positive(t, raised, "the memory raised some bound")
}

// wresnetStage is the graph of wresnet-tiny's layers [1,3) of 4 at 4 micro-batches as the
// root's oracle cuts a pipeline stage (TestTimeFloorIsLower's case under -fastsearch.all:
// testOracle on cpu 1×4, o.mb = 4, o.stage(1, 3), printed with ir.Print and its graph line
// renamed layers1_2 for the parser), on cpu 1×2.
func wresnetStage(t *testing.T) (*ir.Graph, *mesh.Cluster, *mesh.LogicalMesh) {
	t.Helper()
	g, err := frontend.ParseFile("testdata/wresnet-tiny-stage.ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster("cpu")
	require.NoError(t, err)
	c.Hosts, c.DevicesPerHost = 1, 4
	lm, err := mesh.NewLogicalMesh(c, mesh.Submesh{Hosts: 1, Devices: 2}, 1, 2)
	require.NoError(t, err)
	return g, c, lm
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
	free, least := budgetsWith(t, g, lm, base)
	return base, free, least
}

// budgetsWith is boundBudgets under the options base.
func budgetsWith(t *testing.T, g *ir.Graph, lm *mesh.LogicalMesh, base Options) (*Result, int64) {
	t.Helper()
	free, err := Solve(context.Background(), g, lm, base)
	require.NoError(t, err)
	least := base
	least.MemoryBudget = 1
	_, err = Solve(context.Background(), g, lm, least)
	var me *MemoryError
	require.ErrorAs(t, err, &me)
	return free, me.Minimum
}
