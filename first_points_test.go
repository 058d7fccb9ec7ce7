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

// TestFirstPoints: in the lazy search, a first stage's later layer on a 2-D mesh over
// several hosts whose weighed and own relaxed solves do not fit the memory gets its points
// from the Lagrangian's plan (firstPoints: no lp_solve), once, and no weight-1 solve of its
// own. Each such point is a plan that fits; a later stage does not see it (the layer's own
// solve prices it there); and the optimistic price (time and step) of every range from
// layer 0 is the one lower gives without those points (weighedPrice), at most the range
// ILP's (TestFirstStageLowerIsLower's margin). mlp-tiny on 2 hosts of 2, the size floor
// lowered to 0, budgets that bind. Caught: pointsIn handing the points to every range
// (firstSolved dropped).
func TestFirstPoints(t *testing.T) {
	const margin = 0.03
	defer func(v int) { firstLPVars = v }(firstLPVars)
	firstLPVars = 0
	g, err := frontend.ParseFile("testdata/models/mlp-tiny.ir")
	require.NoError(t, err)
	hit := 0
	for _, memory := range []int64{8 << 10} {
		t.Run(fmt.Sprintf("mem%d", memory), func(t *testing.T) {
			c, err := mesh.ParseCluster("cpu")
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = 2, 2
			c.DeviceMemoryBytes = memory
			o, dc := testOracle(t, g, c, 8, 3)
			o.mb = 8
			o.fast, o.lazy = true, true
			require.NotNil(t, o.layerInfos())
			o.allMeshes = o.meshes(dc)
			w := o.weight(0)
			for _, mk := range o.allMeshes {
				if mk.sub.Hosts < 2 || meshFactor(mk.logical) <= 4 {
					continue
				}
				p := &dp.Result{Stages: []dp.Stage{{Start: 0, End: o.lay.L, Submesh: mk.sub, Logical: mk.logical}}}
				for range 3 * o.lay.L { // as settle's rounds would, until nothing is left
					jobs := o.unsolved(p, false)
					if len(jobs) == 0 {
						break
					}
					o.run(jobs, nil)
				}
				first := 0
				for k := 1; k < o.lay.L; k++ {
					if !o.firstSolved(0, k, mk.sub, mk.logical) {
						continue
					}
					at := fmt.Sprintf("layer %d on %v %v", k, mk.sub, mk.logical)
					first++
					pts := o.pointsIn(0, k, mk.sub, mk.logical)
					require.Len(t, pts, 1, at)
					assert.LessOrEqual(t, pts[0].res.PeakMemory, o.memory, "%s: the point fits", at)
					assert.Equal(t, "lagrange", pts[0].res.ILP.Solver, at)
					assert.False(t, o.isSolved(k, mk.sub, mk.logical), "%s: no weight-1 solve of its own", at)
					assert.Empty(t, o.pointsIn(1, k, mk.sub, mk.logical), "%s: a later stage reads the layer's own solve", at)
				}
				if first == 0 {
					continue
				}
				hit += first
				saved := o.firstPts
				for end := 2; end <= o.lay.L; end++ {
					at := fmt.Sprintf("layers 0-%d on %v %v", end-1, mk.sub, mk.logical)
					o.lazy = true
					lo, ok := o.lower(0, end, mk.sub, mk.logical)
					require.True(t, ok, at)
					o.firstPts = map[solveKey][]layerPoint{}
					bare, ok := o.lower(0, end, mk.sub, mk.logical)
					o.firstPts = saved
					require.True(t, ok, at)
					assert.InDelta(t, bare.Time, lo.Time, 1e-12*math.Max(1, bare.Time), "%s: optimistic t", at)
					assert.InDelta(t, bare.Step, lo.Step, 1e-12*math.Max(1, bare.Step), "%s: optimistic u", at)
					o.lazy = false
					sol := o.solve(0, end, mk.sub, mk.logical)
					if sol.ok && sol.res != nil && sol.res.PeakMemory <= o.memory {
						assert.LessOrEqual(t, w*lo.Time+lo.Step, (w*sol.cost.Time+sol.cost.Step)*(1+margin), "%s: optimistic B·t + u", at)
					}
				}
				t.Logf("%v %v: %d layers with first points", mk.sub, mk.logical, first)
			}
		})
	}
	assert.Positive(t, hit, "no layer took first points")
}
