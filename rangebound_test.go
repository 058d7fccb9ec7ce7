package autopar

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// rangeDualMutation is 1; the mutation check of TestRangeDualIsLower sets it to 1.001 by
// hand (every dual bound raised by 0.1 %): the test then fails.
const rangeDualMutation = 1.0

// TestRangeDualIsLower: the dual bound that refutes a whole-network range (rangeDual,
// bound.go) is at most the price, in B·t + u, of every way the range's own ILP solved by
// lp_solve alone (no certificate) gives it — plain and recomputing — on the small models
// on every mesh, at B > 1, under the device's memory and under budgets that bind (where
// the range must recompute or pay for its memory); and where the certificate answered the
// range (kept as its solve), that answer is lp_solve's optimum.
func TestRangeDualIsLower(t *testing.T) {
	type rangeCase struct {
		boundCase
		frac float64 // the budget, a fraction of the device's memory (0: all of it)
	}
	bounded, answered, binding := 0, 0, 0
	for _, tc := range []rangeCase{
		{boundCase{"mlp-tiny", "cpu", 2, 2, 16, 3}, 0},
		{boundCase{"mlp-tiny", "cpu", 1, 4, 16, 3}, 0},
		{boundCase{"gpt-tiny", "cpu", 2, 1, 8, 3}, 0},
		{boundCase{"mlp-tiny", "cpu", 1, 4, 16, 3}, 2e-6},
		// Inputs and constants read by several ops, priced once per consumer by Solve's ILP
		// (sharedValues) and once per layout by Result.Cost (TestFreeBoundIsCostBound):
		// mlp-tiny's x at the budget where MemoryBound's first version stood above a plan
		// (6,016 bytes on 2×2), GPT's ids, labels and masks, on 1-D and 2-D meshes, with
		// fusion (p3.16xlarge: fusedSpill priced) and without.
		{boundCase{"mlp-tiny", "cpu", 2, 2, 16, 3}, 6016.0 / (8 << 30)},
		{boundCase{"mlp-tiny", "p3.16xlarge", 1, 4, 8, 3}, 0},
		{boundCase{"gpt-tiny", "cpu", 2, 2, 4, 3}, 0},
		{boundCase{"gpt-tiny", "p3.16xlarge", 1, 4, 4, 3}, 0},
		{boundCase{"moe-tiny", "cpu", 1, 4, 2, 3}, 0},
		{boundCase{"moe-tiny", "p3.16xlarge", 1, 4, 2, 3}, 0},
	} {
		t.Run(fmt.Sprintf("%s/mem%g", tc.name(), tc.frac), func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			oracleOf := func(lpOnly bool) *oracle {
				o, _ := testOracle(t, g, c, tc.b, tc.layers)
				o.mb = tc.b // as compileWith sets it per count, before the stages are cut
				o.lpOnly = lpOnly
				if tc.frac > 0 {
					o.memory = int64(tc.frac * float64(c.DeviceMemoryBytes))
				}
				return o
			}
			o, ref := oracleOf(false), oracleOf(true)
			_, dc := testOracle(t, g, c, tc.b, tc.layers)
			L := o.lay.L
			require.True(t, o.dualApplies(0, L))
			w := o.weight(0)
			require.Equal(t, float64(tc.b), w)
			for _, mk := range o.meshes(dc) {
				at := fmt.Sprintf("layers 0-%d on %v %v", L-1, mk.sub, mk.logical)
				v := o.rangeDual(0, L, mk.sub, mk.logical) * rangeDualMutation
				if math.IsInf(v, -1) {
					t.Logf("%s: no bound", at)
					continue
				}
				sol := ref.solve(0, L, mk.sub, mk.logical)
				require.True(t, sol.ok, at)
				require.NotNil(t, sol.res, at)
				assert.Equal(t, "lp_solve", sol.res.ILP.Solver, at)
				bounded++
				if sol.res.ILP.MemoryRows > 0 || sol.res.Budget != ref.memory {
					binding++
				}
				ways := append([]dp.StageCost{sol.cost}, sol.remats...)
				for i, way := range ways {
					price := w*way.Time + way.Step
					assert.LessOrEqual(t, v, price*(1+1e-12), "%s, way %d: dual bound over the range ILP's price", at, i)
				}
				price := w*sol.cost.Time + sol.cost.Step
				t.Logf("%s: bound %.9g, range ILP %.9g (%s, memory rows %d), bound/ILP %.6f", at, v, price,
					sol.res.ILP.Status, sol.res.ILP.MemoryRows, v/price)
				sg, err := o.stage(0, L)
				require.NoError(t, err)
				if got := o.solved[solveKey{sg.hash, mk.sub, mk.logical}]; got != nil {
					answered++
					require.True(t, got.ok, at)
					assert.Equal(t, "msgpass", got.res.ILP.Solver, at)
					// The ILP's optimum; the price may differ by the data instructions, which
					// the ILP does not see, where optima tie (docs/DECISIONS.md, "Ties").
					assert.InDelta(t, sol.res.ILP.Objective, got.res.ILP.Objective, 1e-9*sol.res.ILP.Objective, "%s: the certificate's answer", at)
					assert.LessOrEqual(t, v, (w*got.cost.Time+got.cost.Step)*(1+1e-12), "%s: dual bound over the answer's price", at)
				}
			}
		})
	}
	t.Logf("%d bounds checked, %d answered by the certificate, %d under memory rows", bounded, answered, binding)
	assert.Positive(t, bounded)
	assert.Positive(t, answered)
	assert.Positive(t, binding)
}

// TestRefuteRaisesSoundly: refute, handed an optimistic plan that runs the whole network
// as one stage on each mesh, raises that stage's optimistic price (dualRaised, every way;
// stageCost applies it)
// to the range's dual bound and no higher, says so exactly when the bound was above the
// price, and a raised price stays below the range ILP lp_solve prices: the plain way
// below every way, a recomputing way below the same way.
func TestRefuteRaisesSoundly(t *testing.T) {
	tc := boundCase{"mlp-tiny", "cpu", 1, 4, 16, 3}
	g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
	require.NoError(t, err)
	c, err := mesh.ParseCluster(tc.cluster)
	require.NoError(t, err)
	c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
	o, dc := testOracle(t, g, c, tc.b, tc.layers)
	ref, _ := testOracle(t, g, c, tc.b, tc.layers)
	o.mb, ref.mb, ref.lpOnly = tc.b, tc.b, true
	o.fast, o.optimistic = true, true
	L, w := o.lay.L, float64(tc.b)
	raised := 0
	for _, mk := range o.meshes(dc) {
		at := fmt.Sprintf("layers 0-%d on %v %v", L-1, mk.sub, mk.logical)
		before, ok := o.stageCost(0, L, mk.sub, mk.logical)
		require.True(t, ok, at)
		opt := &dp.Result{Stages: []dp.Stage{{Start: 0, End: L, Submesh: mk.sub, Logical: mk.logical, Cost: before}}}
		up := o.refute(opt, 0)
		v := o.duals[rangeKey{0, L, mk.sub, mk.logical}]
		assert.Equal(t, v > w*before.Time+before.Step, up, at)
		assert.False(t, o.refute(opt, 0), "%s: a range's bound is computed once", at)
		// The dual's raise alone: stageCost applies widebig's rangeFloor too, which prices
		// the range by its relaxed solve where one ran (refute keeps a certificate's answer
		// as one: the range's own price, which may tie with lp_solve's plan in the ILP's
		// objective and differ in the data instructions).
		after := o.dualRaised(before, 0, L, mk.sub, mk.logical)
		both, ok := o.stageCost(0, L, mk.sub, mk.logical)
		require.True(t, ok, at)
		assert.GreaterOrEqual(t, w*both.Time+both.Step, (w*after.Time+after.Step)*(1-1e-12), "%s: stageCost raises by the dual", at)
		sol := ref.solve(0, L, mk.sub, mk.logical)
		require.True(t, sol.ok, at)
		ilp := append([]dp.StageCost{sol.cost}, sol.remats...)
		ways := append([]dp.StageCost{after}, after.Remat...)
		require.Len(t, ways, 1+len(before.Remat), at)
		for i, way := range ways {
			was := before
			if i > 0 {
				was = before.Remat[i-1]
			}
			assert.Equal(t, was.Time, way.Time, "%s, way %d: t kept", at, i)
			assert.InDelta(t, max(w*was.Time+was.Step, v), w*way.Time+way.Step, 1e-12*v, "%s, way %d: raised to the bound", at, i)
			if v <= w*was.Time+was.Step {
				continue // not raised: lower's own price (its caveats are TestFirstStageLowerIsLower's)
			}
			for j, x := range ilp {
				if i == 0 || i == j { // the plain way below all; a recomputing way below its own
					assert.LessOrEqual(t, w*way.Time+way.Step, (w*x.Time+x.Step)*(1+1e-12), "%s, way %d against the ILP's way %d", at, i, j)
				}
			}
		}
		if up {
			raised++
		}
	}
	assert.Positive(t, raised, "some bound raises a price")
}
