package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each formula of the collective table against a hand calculation. The links have round
// numbers so the sums can be checked by eye: inside a host α = 1 s, β = 0.01 s/byte;
// across hosts α = 10 s, β = 0.1 s/byte; B = 1200 bytes.
func TestCollectiveTableByHand(t *testing.T) {
	in, ex := Link{Alpha: 1, Beta: 0.01}, Link{Alpha: 10, Beta: 0.1}
	const B = 1200.0
	for _, tc := range []struct {
		k        Collective
		n, hosts int
		want     float64
		hand     string
	}{
		// One host, n = 4: B/n = 300 bytes a step, 3 s a step.
		{AllReduce, 4, 1, 6 * (1 + 3), "2(n−1) = 6 steps of 300 B"},
		{AllGather, 4, 1, 3 * (1 + 3), "n−1 = 3 steps of 300 B"},
		{ReduceScatter, 4, 1, 3 * (1 + 3), "n−1 = 3 steps of 300 B"},
		{AllToAll, 4, 1, 3 * (1 + 0.75), "n−1 = 3 pairs of B/n² = 75 B"},
		// Two hosts × 3 devices, n = 6: B/n = 200 bytes a step.
		{AllReduce, 6, 2, 2*(1+2) + 2*(10+20) + 2*(1+2), "RS in host 2 steps, AR across 2(h−1) = 2, AG in host 2"},
		{AllGather, 6, 2, 1*(10+20) + 2*(1+2), "AG across h−1 = 1 step, AG in host g−1 = 2"},
		{ReduceScatter, 6, 2, 2*(1+2) + 1*(10+20), "RS in host 2, RS across 1"},
		{AllToAll, 6, 2, 2*(1+0.01*B/36) + 3*(10+0.1*B/36), "g−1 = 2 pairs in host, n−g = 3 across"},
		// Nothing to do.
		{AllReduce, 1, 1, 0, "one device"},
		{Slice, 4, 1, 0, "a slice is local"},
	} {
		assert.InDelta(t, tc.want, GroupTime(tc.k, tc.n, tc.hosts, in, ex, B), 1e-9, "%s n=%d hosts=%d: %s", tc.k, tc.n, tc.hosts, tc.hand)
	}
}

// A mesh over a cluster prices its axes by where their groups run: axis 1 of (2, 8) on two
// DGX hosts stays in a host (ring), axis 0 crosses (two hosts, one device each), both axes
// are the hierarchical algorithm over 2 hosts × 8.
func TestMeshCostFollowsTopology(t *testing.T) {
	c, err := ParseCluster("dgx-a100:2")
	require.NoError(t, err)
	m, err := NewLogicalMesh(c, Submesh{Hosts: 2, Devices: 8}, 2, 8)
	require.NoError(t, err)
	in := Link{c.IntraHostLatency, 1 / c.IntraHostBandwidth}
	ex := Link{c.InterHostLatency, 1 / c.InterHostBandwidthPerDevice()}
	const B = 1 << 20
	assert.InDelta(t, 14*(in.Alpha+in.Beta*B/8), m.Cost(AllReduce, Axis1, B), 1e-15)
	assert.InDelta(t, 2*(ex.Alpha+ex.Beta*B/2), m.Cost(AllReduce, Axis0, B), 1e-15)
	assert.InDelta(t, 7*(in.Alpha+in.Beta*B/16)*2+2*(ex.Alpha+ex.Beta*B/16), m.Cost(AllReduce, AxesBoth, B), 1e-15)
	// A hand-made copy of the mesh keeps the flat model.
	flat := m.WithAxisCost(0, m.Alpha[0], m.Beta[0])
	assert.InDelta(t, CollectiveTime(AllReduce, 8, in.Alpha, in.Beta, B), flat.Cost(AllReduce, Axis1, B), 1e-15)
}

// A measured fit replaces the ring formula for its kind and group size only.
func TestMeshCostUsesFits(t *testing.T) {
	c, err := ParseCluster("cpu:4")
	require.NoError(t, err)
	c.Collectives = []CollectiveFit{{Kind: AllGather, Devices: 4, Alpha: 1e-3, Beta: 1e-6}}
	require.NoError(t, c.Validate())
	m, err := NewLogicalMesh(c, Submesh{Hosts: 1, Devices: 4}, 2, 2)
	require.NoError(t, err)
	const B = 4000
	assert.InDelta(t, 1e-3+1e-6*0.75*B, m.Cost(AllGather, AxesBoth, B), 1e-15)
	in := Link{c.IntraHostLatency, 1 / c.IntraHostBandwidth}
	assert.InDelta(t, in.Alpha+in.Beta*B/2, m.Cost(AllGather, Axis1, B), 1e-15, "2 devices: no fit, the ring")
}
