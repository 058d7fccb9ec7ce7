package autopar

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// lagDualMutation is 1; the mutation check of TestLagDualIsLower sets it to 1.01 by hand
// (every bound raised by 1 %): the test then fails.
const lagDualMutation = 1.0

// TestLagDualIsLower: the bounds under the memory that price a whole-network range
// (lagRefute, timefloor.go) are at most the price, in B·t + u, of every way of the range
// that its own ILP's solve gives (any plan it returns: the iterations are capped) under that memory and the DP could
// accept: the plain way where it fits (Memory(1) ≤ the memory), every recomputing way, and
// every way where the bound says a plain plan fits (MemoryDual.Fits). On the small models,
// every mesh, at budgets between each range's least footprint and its free optimum's peak,
// where the memory binds; and there the plain bound is above the free optimum's price
// (the memory raised it), so a bound that ignored the memory would fail the test.
func TestLagDualIsLower(t *testing.T) {
	if testing.Short() {
		t.Skip("solves every small model's whole network under several budgets")
	}
	checked, raised := 0, 0
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 1, 4, 16, 3},
		{"gpt-tiny", "cpu", 2, 1, 8, 3},
		{"gpt-tiny", "cpu", 1, 4, 4, 3},
		{"moe-tiny", "cpu", 1, 4, 2, 3},
		{"wresnet-tiny", "cpu", 1, 4, 4, 3},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			oracleOf := func(memory int64) *oracle {
				o, _ := testOracle(t, g, c, tc.b, tc.layers)
				o.mb = tc.b    // as compileWith sets it per count, before the stages are cut
				o.iters = 5000 // any plan the solve returns is one the bound must be under
				o.memory = memory
				require.NotNil(t, o.layerInfos())
				return o
			}
			free := oracleOf(c.DeviceMemoryBytes)
			_, dc := testOracle(t, g, c, tc.b, tc.layers)
			L := free.lay.L
			w := free.weight(0)
			for _, mk := range free.meshes(dc) {
				fsol := free.solve(0, L, mk.sub, mk.logical)
				if !fsol.ok || fsol.res == nil || fsol.res.PeakMemory > c.DeviceMemoryBytes {
					continue
				}
				least := leastPeak(t, free, mk)
				top := fsol.res.PeakMemory
				if top <= least {
					continue // the fastest plan is the leanest: the memory cannot bind
				}
				freePrice := w*fsol.cost.Time + fsol.cost.Step
				for _, f := range []float64{0.1, 0.6} {
					budget := least + int64(f*float64(top-least))
					at := fmt.Sprintf("layers 0-%d on %v %v at %d bytes", L-1, mk.sub, mk.logical, budget)
					o, ref := oracleOf(budget), oracleOf(budget)
					if !o.lagRefute(0, L, mk.sub, mk.logical, 0) {
						t.Logf("%s: no bound", at)
						continue
					}
					v := o.lagDuals[rangeKey{0, L, mk.sub, mk.logical}]
					plain, remat := v[0]*lagDualMutation, v[1]*lagDualMutation
					sol := ref.solve(0, L, mk.sub, mk.logical)
					if !sol.ok || sol.res == nil {
						continue
					}
					fits := sol.res.ILP.Solver != "" && sol.cost.Memory(1) <= float64(budget)
					ways := append([]dp.StageCost{sol.cost}, sol.remats...)
					for i, way := range ways {
						price := w*way.Time + way.Step
						switch {
						case i > 0:
							assert.LessOrEqual(t, remat, price*(1+1e-12), "%s, way %d: bound over the range ILP's price", at, i)
						case fits:
							assert.LessOrEqual(t, plain, price*(1+1e-12), "%s: plain bound over the range ILP's price", at)
						}
						checked++
					}
					if plain > freePrice*(1+1e-9) {
						raised++
					}
					t.Logf("%s: plain bound %.6g, recomputing %.6g; range ILP %.6g (fits %v), free optimum %.6g",
						at, plain, remat, w*sol.cost.Time+sol.cost.Step, fits, freePrice)
				}
			}
		})
	}
	t.Logf("%d ways checked, %d plain bounds above the free optimum", checked, raised)
	assert.Positive(t, checked)
	assert.Positive(t, raised, "the memory raised some bound")
}

// leastPeak is the least plain peak of the whole network on mk: the min-peak ILP's at a
// one-byte budget.
func leastPeak(t *testing.T, o *oracle, mk meshKey) int64 {
	t.Helper()
	sg, err := o.stage(0, o.lay.L)
	require.NoError(t, err)
	lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
	require.NoError(t, err)
	opts := o.solveOptions(sg, mk.sub, mk.logical, 1)
	_, err = sg.solve(context.Background(), lm, opts)
	var me *sharding.MemoryError
	require.True(t, errors.As(err, &me), "%v", err)
	return me.Minimum
}
