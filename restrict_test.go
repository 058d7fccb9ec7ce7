package autopar

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
)

// TestRestrictedStage: a range of layers priced by its composed plan (restrictStage) runs
// its ops as their layers chose (but where the range merges a follower across a layer
// boundary), from a smaller ILP than the range's; the search reads it through o.solve.
// Below restrictVars (all of these ranges) it is not restricted.
func TestRestrictedStage(t *testing.T) {
	gain := 0 // values as their layers chose, restricted less unrestricted
	defer func(v int, r bool) { restrictVars, restrictRelaxed = v, r }(restrictVars, restrictRelaxed)
	restrictVars = 0        // the tiny models' ranges are below the floor
	restrictRelaxed = false // their ranges' relaxed solves fit: not restricted (TestRestrictedRelaxed)
	for _, tc := range composeCases {
		t.Run(tc.model, func(t *testing.T) {
			o, dc := tc.oracle(t)
			o.fast = true
			if restrictVars == 0 {
				// Below the floor a range is solved by its range ILP.
				restrictVars = 10000
				mk := o.meshes(dc)[len(o.meshes(dc))-1]
				require.True(t, o.composed(0, 2, mk.sub, mk.logical).ok)
				assert.False(t, o.restrictStage(0, 2, mk.sub, mk.logical))
				restrictVars = 0
			}
			ranges, named, same, sameFull := 0, 0, 0, 0
			for _, mk := range o.meshes(dc) {
				for a := 0; a < o.lay.L; a++ {
					for b := a + 2; b <= o.lay.L; b++ {
						cc := o.composed(a, b, mk.sub, mk.logical)
						require.True(t, cc.ok)
						require.True(t, o.restrictStage(a, b, mk.sub, mk.logical), "layers %d-%d on %v", a, b-1, mk)
						k := rangeKey{a, b, mk.sub, mk.logical}
						rs := o.restricted[k]
						assert.False(t, o.exactAt[k].exact)
						assert.Same(t, rs, o.solve(a, b, mk.sub, mk.logical))
						sg, err := o.stage(a, b)
						require.NoError(t, err)
						full := o.solveStage(sg, mk.sub, mk.logical)
						require.True(t, full.ok)
						ranges++
						if mk.sub.Devices*mk.sub.Hosts > 1 {
							assert.Less(t, rs.res.ILP.Variables, full.res.ILP.Variables, "layers %d-%d on %v", a, b-1, mk)
						}
						// The ops run as their layers chose, unless the range merges a follower
						// across the boundary (that node keeps its strategies): more of them
						// than in the range ILP's own plan.
						for i := range sg.g.Values {
							v := &sg.g.Values[i]
							for j, p := range cc.points {
								lg := o.infos[a+j].sg.g
								if id, ok := lg.Lookup(v.Name); ok && lg.Value(id).Op == v.Op {
									named++
									if p.res.Strategies[id].Name == rs.res.Strategies[i].Name {
										same++
									}
									if p.res.Strategies[id].Name == full.res.Strategies[i].Name {
										sameFull++
									}
									break
								}
							}
						}
					}
				}
			}
			t.Logf("%d ranges restricted: %d of %d values as their layers chose (the range ILP's plan: %d)", ranges, same, named, sameFull)
			assert.GreaterOrEqual(t, same, sameFull)
			assert.GreaterOrEqual(t, float64(same), 0.98*float64(named))
			gain += same - sameFull
		})
	}
	assert.Positive(t, gain, "the restriction chose the layers' strategies where the range ILP did not")
}

// TestRangeFloorIsLower: under a memory budget that binds the whole step's range (97 % of
// the peak of its ILP's optimum without the memory rows), the range's relaxed solve
// (rangeRelaxed) bounds every way its range ILP runs it in the one-stage step B·t + u,
// and rangeFloor raises the optimistic price (oracle.lower) only up to that bound: each
// way of the floored price is at most what lower said or the range ILP's least step.
// restrictStage restricts such a range and its plan is never below the range ILP's; where
// the relaxed plan fits (the budget far above), the range is not restricted and its solve
// is the relaxed one, at the range ILP's price.
func TestRangeFloorIsLower(t *testing.T) {
	defer func(v int) { restrictVars = v }(restrictVars)
	restrictVars = 0
	checked, raised, restricted := 0, 0, 0
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 1, 4, 4, 3},
		{"gpt-tiny", "cpu", 2, 1, 4, 3},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o0, dc := tc.oracle(t)
			for _, mk := range o0.meshes(dc) {
				at := fmt.Sprintf("%v %v", mk.sub, mk.logical)
				o, _ := tc.oracle(t)
				o.mb, o.fast = tc.b, true
				b := float64(tc.b)
				L := o.lay.L
				k := rangeKey{0, L, mk.sub, mk.logical}
				sg, err := o.stage(0, L)
				require.NoError(t, err)
				require.Equal(t, tc.b, sg.mb)
				free := o.solveRelaxed(sg, mk.sub, mk.logical)
				require.True(t, free.ok, at)
				if free.exact && mk.sub.NumDevices() > 1 {
					// The relaxed plan fits: the range's solve, not restricted.
					require.True(t, o.composed(0, L, mk.sub, mk.logical).ok, at)
					assert.False(t, o.restrictStage(0, L, mk.sub, mk.logical), at)
					got := o.solved[solveKey{sg.hash, mk.sub, mk.logical}]
					require.NotNil(t, got, at)
					full := o.solveStageBudget(sg, mk.sub, mk.logical, o.memory, nil, nil, nil)
					require.True(t, full.ok, at)
					assert.InEpsilon(t, o.weighed(full), o.weighed(got), 1e-9, at)
				}

				o, _ = tc.oracle(t)
				o.mb, o.fast = tc.b, true
				o.memory = free.res.PeakMemory * 97 / 100
				sg, err = o.stage(0, L)
				require.NoError(t, err)
				sol := o.solveStage(sg, mk.sub, mk.logical)
				if !sol.ok || sol.res == nil {
					continue // nothing fits: no price to bound
				}
				if cc := o.composed(0, L, mk.sub, mk.logical); cc.ok && o.restrictStage(0, L, mk.sub, mk.logical) {
					assert.GreaterOrEqual(t, o.weighed(o.restricted[k]), o.weighed(sol)*(1-1e-9), "%s: a plan of the range", at)
					restricted++
				}
				r := o.rangeRelaxed(sg, mk.sub, mk.logical)
				require.NotNil(t, r, at)
				require.False(t, r.exact, "%s: over the budget", at)
				c, ok := o.lower(0, L, mk.sub, mk.logical)
				require.True(t, ok, at)
				f := o.rangeFloor(c, 0, L, mk.sub, mk.logical)
				ways := append([]dp.StageCost{sol.cost}, sol.remats...)
				least := math.Inf(1)
				for _, w := range ways {
					least = min(least, b*w.Time+w.Step)
				}
				assert.LessOrEqual(t, b*r.cost.Time+r.cost.Step, least*(1+1e-9), "%s: the relaxed range bounds its ILP", at)
				cw, fw := append([]dp.StageCost{c}, c.Remat...), append([]dp.StageCost{f}, f.Remat...)
				require.Len(t, fw, len(cw))
				for i := range fw {
					assert.Equal(t, cw[i].Time, fw[i].Time, at)
					assert.GreaterOrEqual(t, fw[i].Step, cw[i].Step, at)
					assert.LessOrEqual(t, b*fw[i].Time+fw[i].Step, max(b*cw[i].Time+cw[i].Step, least*(1+1e-9)), "%s: way %d", at, i)
				}
				if b*f.Time+f.Step > b*c.Time+c.Step {
					raised++
				}
				checked++
			}
		})
	}
	t.Logf("%d whole ranges under a binding budget, %d floors raised, %d restricted", checked, raised, restricted)
	assert.Positive(t, raised)
}
