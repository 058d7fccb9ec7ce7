package autopar

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// TestHopelessStage: a one-layer stage whose least footprint, recomputing where it may,
// exceeds pruneFactor times the device memory is priced without the fallback's ILPs
// (oracle.hopeless), and that price, like the fallback plan's it replaces, is rejected by
// the DP's memory check every way it can run (plain, recomputing whole, layer by layer,
// any micro-batches in flight), while staying at or below the fallback plan's with one
// micro-batch in flight (time, weights, memory: bounds). Stages of several layers, and
// those under the factor, are solved. The fallback plan's every way holding at least its
// least footprint is the premise of hopeless (remat.go's pricing); the test fails if that
// changes.
func TestHopelessStage(t *testing.T) {
	pruned := map[bool]int{}
	// wresnet-tiny in 2 layers, 100 KiB a device (stages are pruned past 400 KiB): its
	// layers need 150–1007 KiB a device, the whole model 602 KiB.
	c := cluster(t, "cpu:2")
	c.DeviceMemoryBytes = 100 << 10
	o, dc := testOracle(t, model(t, "wresnet-tiny"), c, 1, 2)
	require.Equal(t, 2, o.lay.L)
	hopelessStages(t, o, dc, pruned)
	assert.Positive(t, pruned[true])
}

func hopelessStages(t *testing.T, o *oracle, dc dp.Cluster, pruned map[bool]int) {
	for _, r := range [][2]int{{0, 1}, {1, 2}, {0, 2}} {
		sg, err := o.stage(r[0], r[1])
		require.NoError(t, err)
		require.Equal(t, r[1]-r[0] == 1, sg.single)
		for _, mk := range o.meshes(dc) {
			lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
			require.NoError(t, err)
			opts := sharding.Options{Cluster: o.c, MemoryBudget: o.memory, TimeLimit: o.limit, SolveLayersOnce: true,
				BlockKeys: sg.keys, Reshard: o.memo(mk.sub, mk.logical), Microbatches: sg.mb, Update: sg.once, Accumulated: sg.acc}
			_, err = sg.solve(o.ctx, lm, opts)
			var me *sharding.MemoryError
			if errors.As(err, &me) { // as solveStageBudget under RematAuto: recomputing layer by layer
				opts.Recompute = sg.remat.layers.marks
				_, err = sharding.Solve(o.ctx, sg.g, lm, opts)
			}
			if !errors.As(err, &me) {
				require.NoError(t, err)
				continue // fits
			}
			minimum := float64(me.Minimum)

			got := o.solveStage(sg, mk.sub, mk.logical)
			require.True(t, got.ok)
			o.leastPlans = true // the fallback's way: the plan of least memory, solved
			ref := o.solveStage(sg, mk.sub, mk.logical)
			o.leastPlans = false
			require.True(t, ref.ok)
			if ref.res == nil {
				continue // its weights alone overflow the memory pruneFactor times: pruned before
			}
			assert.GreaterOrEqual(t, float64(ref.res.PeakMemory), minimum*(1-1e-9))
			far := sg.single && minimum > pruneFactor*float64(o.memory)
			require.Equal(t, far, got.res == nil, "layers %v on %v: priced without an ILP only one layer past pruneFactor", r, lm)
			if got.res != nil {
				continue // might fit layer by layer: solved
			}
			pruned[sg.single]++
			require.Len(t, got.remats, 2)
			require.Len(t, ref.remats, 2)
			ways := []costPair{{got.cost, ref.cost}, {got.remats[0], ref.remats[0]}, {got.remats[1], ref.remats[1]}}
			for i, w := range ways {
				for _, inflight := range []int{1, 4} {
					assert.Greater(t, w.got.Memory(inflight), float64(o.memory), "layers %v on %v, way %d", r, lm, i)
					assert.Greater(t, w.ref.Memory(inflight), float64(o.memory), "layers %v on %v, way %d", r, lm, i)
				}
				if sg.single {
					assert.GreaterOrEqual(t, w.got.Memory(1), minimum*(1-1e-9), "layers %v on %v, way %d", r, lm, i)
					assert.GreaterOrEqual(t, w.ref.Memory(1), float64(ref.res.PeakMemory)*(1-1e-9), "layers %v on %v, way %d", r, lm, i)
				}
				assert.LessOrEqual(t, w.got.Memory(1), w.ref.Memory(1)*(1+1e-9), "layers %v on %v, way %d: a bound", r, lm, i)
				assert.LessOrEqual(t, w.got.Time, w.ref.Time*(1+1e-9), "layers %v on %v, way %d: a bound", r, lm, i)
				assert.LessOrEqual(t, w.got.WeightBytes, w.ref.WeightBytes*(1+1e-9))
				assert.Equal(t, w.ref.Recompute, w.got.Recompute)
				assert.Equal(t, w.ref.Checkpoints, w.got.Checkpoints)
			}
		}
	}
}

type costPair struct{ got, ref dp.StageCost }
