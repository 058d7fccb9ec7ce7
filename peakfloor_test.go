package autopar

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeakFloorsAreLower: the peak floors memRefute gives a range (oracle.peakFloors:
// sharding.PeakFloors under the range's plain, whole and layer-by-layer recomputation) are
// at most the least peak any plan of the range reaches under that recomputation, which the
// sharding pass's min-peak ILP finds exactly at a 1-byte budget (MemoryError.Minimum,
// Exact), and at most the memory, Memory(1), of every way of the range's solve as the DP
// sees it (stageSolution: plain, whole, layer by layer). Every range of gpt-tiny on 2×1
// and on one device at one micro-batch (where recomputing layer by layer peaks below the
// plain floor), mlp-tiny on 1×4, every logical mesh: 138 least peaks, 1 s. Mutation
// checks (branch sound): PeakFloors taking each value's largest candidate instead of its
// least fails every case (207 failures); taking the plain live ranges for every way fails
// gpt-tiny on one device 4 times (layer by layer).
func TestPeakFloorsAreLower(t *testing.T) {
	for _, tc := range []boundCase{
		{"gpt-tiny", "cpu", 2, 1, 4, 3},
		{"gpt-tiny", "cpu", 1, 1, 1, 4},
		{"mlp-tiny", "cpu", 1, 4, 4, 3},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o, dc := tc.oracle(t)
			o.mb = tc.b
			checked, tight, worst := 0, 0, 0.0
			for _, mk := range o.meshes(dc) {
				lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
				require.NoError(t, err)
				for start := 0; start < o.lay.L; start++ {
					for end := start + 1; end <= o.lay.L; end++ {
						require.True(t, o.peakFloors(start, end, mk.sub, mk.logical))
						f := o.peaks[rangeKey{start, end, mk.sub, mk.logical}]
						sg, err := o.stage(start, end)
						require.NoError(t, err)
						at := fmt.Sprintf("layers %d-%d on %v %v", start, end-1, mk.sub, mk.logical)
						marks := []*sharding.Recompute{nil, sg.remat.whole.marks, sg.remat.layers.marks}
						for i, rc := range marks {
							opts := o.solveOptions(sg, mk.sub, mk.logical, 1)
							opts.Recompute = rc
							_, err := sg.solve(context.Background(), lm, opts)
							var me *sharding.MemoryError
							require.True(t, errors.As(err, &me), "%s, way %d: %v", at, i, err)
							if !me.Exact {
								continue
							}
							assert.LessOrEqual(t, f[i], float64(me.Minimum), "%s, way %d: floor above the least peak", at, i)
							worst = max(worst, f[i]/float64(me.Minimum))
							if f[i] >= 0.5*float64(me.Minimum) {
								tight++
							}
							checked++
						}
						sol := o.solve(start, end, mk.sub, mk.logical)
						require.True(t, sol.ok, at)
						assert.LessOrEqual(t, f[0], sol.cost.Memory(1)*(1+1e-9), "%s: plain", at)
						require.Len(t, sol.remats, 2, at)
						assert.LessOrEqual(t, f[1], sol.remats[0].Memory(1)*(1+1e-9), "%s: whole", at)
						assert.LessOrEqual(t, f[2], sol.remats[1].Memory(1)*(1+1e-9), "%s: layer by layer", at)
					}
				}
			}
			t.Logf("%d least peaks checked, %d floors at half of theirs or more, floor/least up to %.3f", checked, tight, worst)
			assert.Positive(t, checked)
			assert.Positive(t, tight, "the floors bound something")
		})
	}
}

// TestCheapFirst: exactly opens the incumbent's restricted stages on one-dimensional
// meshes first only while the optimistic plan would open a restricted stage on a
// two-dimensional one (cheapFirst), and never a stage its range ILP priced already.
func TestCheapFirst(t *testing.T) {
	o := &oracle{restricted: map[rangeKey]*stageSolution{}, exactAt: map[rangeKey]composedCost{}}
	sub := mesh.Submesh{Hosts: 1, Devices: 4}
	line, grid := mesh.LogicalShape{1, 4}, mesh.LogicalShape{2, 2}
	stage := func(start, end int, l mesh.LogicalShape) dp.Stage {
		return dp.Stage{Start: start, End: end, Submesh: sub, Logical: l}
	}
	opt := &dp.Result{Stages: []dp.Stage{stage(0, 8, grid)}}
	best := &dp.Result{Stages: []dp.Stage{stage(0, 4, line), stage(4, 8, grid)}}
	assert.Nil(t, o.cheapFirst(opt, best), "no restricted stage in opt")
	o.restricted[stageKey(opt.Stages[0])] = &stageSolution{}
	assert.Nil(t, o.cheapFirst(opt, best), "no restricted stage in best")
	o.restricted[stageKey(best.Stages[0])] = &stageSolution{}
	o.restricted[stageKey(best.Stages[1])] = &stageSolution{}
	got := o.cheapFirst(opt, best)
	require.NotNil(t, got)
	assert.Equal(t, []dp.Stage{best.Stages[0]}, got.Stages, "the 1-D restricted stage only")
	assert.Nil(t, o.cheapFirst(opt, nil), "no incumbent")
	o.exactAt[stageKey(best.Stages[0])] = composedCost{exact: true}
	assert.Nil(t, o.cheapFirst(opt, best), "priced by its range ILP already")
	o.exactAt[stageKey(opt.Stages[0])] = composedCost{exact: true}
	o.restricted[stageKey(stage(0, 8, line))] = &stageSolution{}
	assert.Nil(t, o.cheapFirst(&dp.Result{Stages: []dp.Stage{stage(0, 8, line)}}, best), "opt's restricted stage is 1-D")
}
