package autopar

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// TestLeanBigLayers: a layer whose ILP has leanBigVars variables or more, on a 2-D mesh
// over several hosts, gets one memory-lean point, its plan of least footprint (one lean
// solve where two ran), no larger than the two budgets' leanest; on one host both
// budgets still run.
// mlp-tiny's layers are small, so the floor is lowered to 0 (and raised past them).
func TestLeanBigLayers(t *testing.T) {
	defer func(v int) { leanBigVars = v }(leanBigVars)
	g, err := frontend.ParseFile("testdata/models/mlp-tiny.ir")
	require.NoError(t, err)
	lean := func(floor, hosts, devices int, logical mesh.LogicalShape) (solves int64, least []float64) {
		leanBigVars = floor
		c, err := mesh.ParseCluster("cpu")
		require.NoError(t, err)
		c.Hosts, c.DevicesPerHost = hosts, devices
		c.DeviceMemoryBytes = 20 << 10
		o, _ := testOracle(t, g, c, 4, 3)
		o.mb = 4
		o.fast = true
		require.NotNil(t, o.layerInfos())
		sub := mesh.Submesh{Hosts: hosts, Devices: devices}
		for k := range o.lay.L {
			fastest := o.layerPoints(k, sub, logical, false)
			if len(fastest) == 0 || fastest[0].res.PeakMemory > o.memory {
				continue
			}
			before := o.solves.Load()
			l := math.Inf(1)
			for _, p := range o.layerPoints(k, sub, logical, true) {
				l = min(l, p.memory())
			}
			least = append(least, l)
			solves += o.solves.Load() - before
		}
		return solves, least
	}
	for _, m := range []struct {
		hosts, devices int
		logical        mesh.LogicalShape
		cut            bool
	}{{2, 2, mesh.LogicalShape{2, 2}, true}, {1, 4, mesh.LogicalShape{2, 2}, false}} {
		all, allPts := lean(math.MaxInt, m.hosts, m.devices, m.logical)
		big, bigPts := lean(0, m.hosts, m.devices, m.logical)
		t.Logf("%dx%d on %d hosts: %d lean solves with both budgets, %d at the floor", m.logical[0], m.logical[1], m.hosts, all, big)
		require.Positive(t, all)
		if !m.cut {
			assert.Equal(t, all, big)
			continue
		}
		assert.Less(t, big, all)
		// Each layer's lean point is its plan of least footprint: no more memory than the
		// leanest of the two budgets' points.
		require.Len(t, bigPts, len(allPts))
		for k := range allPts {
			assert.LessOrEqual(t, bigPts[k], allPts[k], "layer %d", k)
		}
	}
}
