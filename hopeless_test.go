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

// TestHopelessLayer: a one-layer stage whose least footprint exceeds the device memory is
// priced without the fallback's ILPs (oracle.hopeless), and that price, like the fallback
// plan's it replaces, is rejected by the DP's memory check every way it can run
// (plain, recomputing whole, layer by layer, any micro-batches in flight), while its time
// and weights stay below the fallback plan's. The fallback plan's recomputing ways holding
// at least its plain peak is the premise of hopeless (remat.go prices a single layer so);
// the test fails if that changes.
func TestHopelessLayer(t *testing.T) {
	c := cluster(t, "cpu:2")
	c.DeviceMemoryBytes = 64 << 10 // below every layer's footprint
	o, dc := testOracle(t, model(t, "gpt-tiny"), c, 1, 0)
	n := 0
	for k := range o.lay.L {
		sg, err := o.stage(k, k+1)
		require.NoError(t, err)
		require.True(t, sg.single)
		for _, mk := range o.meshes(dc) {
			lm, err := mesh.NewLogicalMesh(o.c, mk.sub, mk.logical[0], mk.logical[1])
			require.NoError(t, err)
			_, err = sharding.Solve(o.ctx, sg.g, lm, sharding.Options{Cluster: o.c, MemoryBudget: o.memory, TimeLimit: o.limit,
				SolveLayersOnce: true, BlockKeys: sg.keys, Reshard: o.memo(mk.sub, mk.logical)})
			var me *sharding.MemoryError
			require.True(t, errors.As(err, &me), "layer %d on %v: %v", k, lm, err)
			minimum := float64(me.Minimum)

			got := o.solveStage(sg, mk.sub, mk.logical)
			require.True(t, got.ok)
			assert.Nil(t, got.res, "layer %d on %v: priced without an ILP", k, lm)
			multi := *sg
			multi.single = false // the fallback's way: the plan of least memory, solved
			ref := o.solveStage(&multi, mk.sub, mk.logical)
			require.True(t, ref.ok)
			require.NotNil(t, ref.res)
			require.Len(t, got.remats, 2)
			require.Len(t, ref.remats, 2)
			for _, inflight := range []int{1, 4} {
				for i, c := range append([]costPair{{got.cost, ref.cost}}, costPair{got.remats[0], ref.remats[0]}, costPair{got.remats[1], ref.remats[1]}) {
					assert.GreaterOrEqual(t, c.got.Memory(inflight), minimum, "layer %d on %v, way %d", k, lm, i)
					assert.Greater(t, c.got.Memory(inflight), float64(o.memory))
					assert.GreaterOrEqual(t, c.ref.Memory(inflight), float64(ref.res.PeakMemory)*(1-1e-9), "layer %d on %v, way %d", k, lm, i)
					assert.LessOrEqual(t, c.got.Time, c.ref.Time*(1+1e-9), "layer %d on %v, way %d: a lower bound", k, lm, i)
					assert.LessOrEqual(t, c.got.WeightBytes, c.ref.WeightBytes*(1+1e-9))
					assert.Equal(t, c.ref.Recompute, c.got.Recompute)
					assert.Equal(t, c.ref.Checkpoints, c.got.Checkpoints)
				}
			}
			assert.GreaterOrEqual(t, float64(ref.res.PeakMemory), minimum*(1-1e-9))
			n++
		}
	}
	assert.Positive(t, n)
}

type costPair struct{ got, ref dp.StageCost }
