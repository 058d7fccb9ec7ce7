package autopar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// timeFloorMutation is 1; the mutation check of TestTimeFloorIsLower sets it to 1.01 by hand
// (every floor raised by 1 %): the test then fails.
const timeFloorMutation = 1.0

// TestTimeFloorIsLower: the floors on t that price a pipeline stage's range under the
// memory (timeRefute, pipefloor.go) are at most the t of every way of the range that its
// own ILP's solve gives (any plan it returns: the iterations are capped) and the DP could
// accept (Memory(1) within the memory). On the small models, every range of two or more
// layers but the whole network (first stages weighed B, the others 1), every mesh, at
// budgets between the range's least footprint and its free optimum's peak, where the
// memory binds, and one under that footprint, where only recomputing fits (moe-tiny,
// wresnet-tiny and gpt-tiny on p3.16xlarge as well under -fastsearch.all); there some
// plain floor is above the free optimum's t (the memory raised it), so a floor that
// ignored the memory would fail the test.
func TestTimeFloorIsLower(t *testing.T) {
	if testing.Short() {
		t.Skip("solves every small model's ranges under several budgets")
	}
	checked, raised, tight, resumed := 0, 0, 0, 0
	cases := []boundCase{
		{"mlp-tiny", "cpu", 1, 4, 16, 4},
		{"gpt-tiny", "cpu", 2, 1, 8, 3},
		{"gpt-tiny", "cpu", 1, 4, 4, 3},
	}
	if *fastSearchAll { // 1–3 minutes more
		cases = append(cases, boundCase{"moe-tiny", "cpu", 1, 4, 2, 3}, boundCase{"wresnet-tiny", "cpu", 1, 4, 4, 4},
			boundCase{"gpt-tiny", "p3.16xlarge", 1, 4, 4, 3})
	}
	for _, tc := range cases {
		t.Run(tc.name(), func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			oracleOf := func(memory int64) *oracle {
				o, _ := testOracle(t, g, c, tc.b, tc.layers)
				o.mb = tc.b    // as compileWith sets it per count, before the stages are cut
				o.iters = 5000 // any plan the solve returns is one the floor must be under
				o.memory = memory
				require.NotNil(t, o.layerInfos())
				return o
			}
			free := oracleOf(c.DeviceMemoryBytes)
			_, dc := testOracle(t, g, c, tc.b, tc.layers)
			L := free.lay.L
			for start := 0; start < L; start++ {
				for end := start + 2; end <= L; end++ {
					if free.dualApplies(start, end) {
						continue
					}
					for _, mk := range free.meshes(dc) {
						fsol := free.solve(start, end, mk.sub, mk.logical)
						if !fsol.ok || fsol.res == nil || fsol.res.PeakMemory > c.DeviceMemoryBytes {
							continue
						}
						least := leastRangePeak(t, free, start, end, mk)
						top := fsol.res.PeakMemory
						if top <= least {
							continue // the fastest plan is the leanest: the memory cannot bind
						}
						for _, f := range []float64{-0.1, 0.1, 0.6} { // below the least plain footprint: recomputing only
							budget := least + int64(f*float64(top-least))
							if budget <= 0 {
								continue
							}
							at := fmt.Sprintf("layers %d-%d on %v %v at %d bytes", start, end-1, mk.sub, mk.logical, budget)
							o, ref := oracleOf(budget), oracleOf(budget)
							o.peakFloors(start, end, mk.sub, mk.logical) // as memRefute before it: where none fits plainly, the recomputing bound alone
							// First to a target just past the free optimum, where the searches
							// stop short, then on to no target: the floors gone on from where
							// they stopped (timeCut) are checked.
							k := rangeKey{start, end, mk.sub, mk.logical}
							if !o.timeRefute(start, end, mk.sub, mk.logical, float64(tc.b)*fsol.cost.Time*1.01) {
								t.Logf("%s: no floor", at)
								continue
							}
							first, short := o.timeFloors[k], o.timeCuts[k] != nil
							if o.timeRefute(start, end, mk.sub, mk.logical, math.MaxFloat64) {
								resumed++
								assert.True(t, short, "%s: a search went on that had not stopped short", at)
							}
							assert.False(t, o.timeRefute(start, end, mk.sub, mk.logical, math.MaxFloat64), "%s: once to a target", at)
							v := o.timeFloors[k]
							assert.GreaterOrEqual(t, v[0], first[0], "%s: the plain floor fell as its search went on", at)
							assert.GreaterOrEqual(t, v[1], first[1], "%s: the recomputing floor fell as its search went on", at)
							plain, remat := v[0]*timeFloorMutation, v[1]*timeFloorMutation
							sol := ref.solve(start, end, mk.sub, mk.logical)
							if !sol.ok || sol.res == nil {
								continue
							}
							plainly := sol.cost.Memory(1) <= float64(budget) // else the recomputing solve's plan
							if excess := memoryBoundExcess(t, ref, start, end, mk, sol.res, plainly); excess > 0 {
								// The floor rests on sharding.MemoryBound's bound, which must be
								// under the price of every plan that fits (DECISIONS, "pipe" found
								// it over before objcost made the ILP's objective the price).
								t.Errorf("%s: MemoryBound over the solve's plan by %.3g %%", at, 100*excess)
								continue
							}
							ways := append([]dp.StageCost{sol.cost}, sol.remats...)
							for i, way := range ways {
								if way.Memory(1) > float64(budget) {
									continue // the DP rejects it
								}
								floor := plain
								if i > 0 {
									floor = remat
								}
								assert.LessOrEqual(t, floor, way.Time*(1+1e-12), "%s, way %d: floor over the range ILP's t", at, i)
								checked++
								if floor*1.01 > way.Time*(1+1e-12) {
									tight++
								}
							}
							if plain > fsol.cost.Time*(1+1e-9) {
								raised++
							}
							t.Logf("%s: floors %.6g plain, %.6g recomputing; range ILP t %.6g (peak %d), free optimum t %.6g",
								at, plain, remat, sol.cost.Time, sol.res.PeakMemory, fsol.cost.Time)
						}
					}
				}
			}
		})
	}
	t.Logf("%d ways checked, %d under 1.01 × their floor, %d plain floors above the free optimum's t, %d searches gone on",
		checked, tight, raised, resumed)
	assert.Positive(t, checked)
	assert.Positive(t, resumed, "some floor's search stopped at its target and went on")
	assert.Positive(t, raised, "the memory raised some floor")
	assert.Positive(t, tight, "some floor within 1 % of its price: the mutation fails the test")
}

// leastRangePeak is the least plain peak of layers [start, end) on mk: the min-peak ILP's
// at a one-byte budget.
func leastRangePeak(t *testing.T, o *oracle, start, end int, mk meshKey) int64 {
	t.Helper()
	sg, err := o.stage(start, end)
	require.NoError(t, err)
	lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
	require.NoError(t, err)
	opts := o.solveOptions(sg, mk.sub, mk.logical, 1)
	_, err = sg.solve(context.Background(), lm, opts)
	var me *sharding.MemoryError
	require.True(t, errors.As(err, &me), "%v", err)
	return me.Minimum
}

// memoryBoundExcess is how far, relative, sharding.MemoryBound's bound under o's memory at
// the range's own weight (as lagRefute asks it) is above res, a plan of the range's solve
// that fits that memory (plainly, or recomputing layer by layer as solveStageOpts solves
// it again): 0 where it is not (or res does not fit).
func memoryBoundExcess(t *testing.T, o *oracle, start, end int, mk meshKey, res *sharding.Result, plainly bool) float64 {
	t.Helper()
	if res.PeakMemory > o.memory {
		return 0
	}
	sg, err := o.stage(start, end)
	require.NoError(t, err)
	lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
	require.NoError(t, err)
	opts := o.solveOptions(sg, mk.sub, mk.logical, o.memory)
	if !plainly {
		opts.Recompute = sg.remat.layers.marks
	}
	d, err := sharding.MemoryBound(context.Background(), sg.g, lm, opts, lagSweeps)
	require.NoError(t, err)
	opts.Force = map[ir.ValueID]int{}
	for v, k := range res.Choice {
		opts.Force[ir.ValueID(v)] = k
	}
	plan, err := sharding.MemoryBound(context.Background(), sg.g, lm, opts, lagSweeps) // the plan's own objective
	require.NoError(t, err)
	if d.Under <= plan.Bound*(1+1e-12) {
		return 0
	}
	return d.Under/plan.Bound - 1
}
