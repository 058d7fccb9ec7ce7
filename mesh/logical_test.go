package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustCluster(t *testing.T, arg string) *Cluster {
	t.Helper()
	c, err := ParseCluster(arg)
	require.NoError(t, err)
	return c
}

func TestShapeStrings(t *testing.T) {
	assert.Equal(t, "2x8", Submesh{2, 8}.String())
	assert.Equal(t, 16, Submesh{2, 8}.NumDevices())
	assert.Equal(t, "4x2", LogicalShape{4, 2}.String())
	assert.Equal(t, 8, LogicalShape{4, 2}.NumDevices())
}

func TestLogicalMeshAxisCosts(t *testing.T) {
	c := mustCluster(t, "dgx-a100:2")
	intra := [2]float64{3e-6, 1 / 300e9}
	inter := [2]float64{10e-6, 1 / 25e9}
	for _, tc := range []struct {
		sub          Submesh
		n0, n1       int
		axis0, axis1 [2]float64
	}{
		{Submesh{2, 8}, 2, 8, inter, intra},
		{Submesh{2, 8}, 4, 4, inter, intra},
		{Submesh{2, 8}, 1, 16, intra, inter}, // axis 0 has one device: no link at all
		{Submesh{2, 8}, 16, 1, inter, intra},
		{Submesh{1, 8}, 2, 4, intra, intra},
	} {
		m, err := NewLogicalMesh(c, tc.sub, tc.n0, tc.n1)
		require.NoError(t, err)
		got := [2][2]float64{{m.Alpha[0], m.Beta[0]}, {m.Alpha[1], m.Beta[1]}}
		assert.Equal(t, [2][2]float64{tc.axis0, tc.axis1}, got, "%s %s", tc.sub, m)
		a, b := m.AxisCost(AxesBoth)
		assert.Equal(t, [2]float64{max(tc.axis0[0], tc.axis1[0]), max(tc.axis0[1], tc.axis1[1])}, [2]float64{a, b})
	}
}

func TestLogicalMeshErrors(t *testing.T) {
	c := mustCluster(t, "dgx-a100:2")
	_, err := NewLogicalMesh(c, Submesh{2, 8}, 3, 5)
	assert.EqualError(t, err, "mesh: logical mesh 3x5 does not cover submesh 2x8 of 16 devices")
	_, err = NewLogicalMesh(c, Submesh{3, 8}, 3, 8)
	assert.ErrorContains(t, err, "does not fit cluster")
	_, err = NewLogicalMeshAt(c, Submesh{1, 4}, 6, 2, 2)
	assert.ErrorContains(t, err, "submesh 1x4 at device 6 does not fit")
	_, err = NewUniformMesh(0, 2, 1, 1)
	assert.Error(t, err)
	_, err = NewUniformMesh(2, 2, -1, 1)
	assert.Error(t, err)
}

func TestLogicalMeshAtPlacesDevices(t *testing.T) {
	c := mustCluster(t, "dgx-a100:2")
	m, err := NewLogicalMeshAt(c, Submesh{1, 4}, 12, 2, 2)
	require.NoError(t, err)
	assert.Equal(t, []DeviceID{12, 13, 14, 15}, m.Devices)
	assert.Equal(t, DeviceID(14), m.Device(1, 0))
	i, j, ok := m.Coord(15)
	assert.True(t, ok)
	assert.Equal(t, [2]int{1, 1}, [2]int{i, j})
	_, _, ok = m.Coord(3)
	assert.False(t, ok)
}

func TestGroups(t *testing.T) {
	m, err := NewUniformMesh(2, 3, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, [][]DeviceID{{0, 3}, {1, 4}, {2, 5}}, m.Groups(Axis0))
	assert.Equal(t, [][]DeviceID{{0, 1, 2}, {3, 4, 5}}, m.Groups(Axis1))
	assert.Equal(t, [][]DeviceID{{0, 1, 2, 3, 4, 5}}, m.Groups(AxesBoth))
	assert.Len(t, m.Groups(AxesNone), 6)
	assert.Equal(t, 2, m.AxisSize(Axis0))
	assert.Equal(t, 3, m.AxisSize(Axis1))
	assert.Equal(t, 6, m.AxisSize(AxesBoth))
	assert.Equal(t, 1, m.AxisSize(AxesNone))
}

func TestWithAxisCost(t *testing.T) {
	m, err := NewUniformMesh(2, 2, 1, 1)
	require.NoError(t, err)
	n := m.WithAxisCost(1, 5, 0.5)
	assert.Equal(t, [2]float64{1, 5}, n.Alpha)
	assert.Equal(t, [2]float64{1, 0.5}, n.Beta)
	assert.Equal(t, [2]float64{1, 1}, m.Alpha, "original untouched")
	assert.Panics(t, func() { m.WithAxisCost(2, 1, 1) })
}

func TestSendRecvCost(t *testing.T) {
	c := mustCluster(t, "dgx-a100:2")
	a, err := NewLogicalMeshAt(c, Submesh{1, 4}, 0, 1, 4)
	require.NoError(t, err)
	b, err := NewLogicalMeshAt(c, Submesh{1, 4}, 4, 2, 2)
	require.NoError(t, err)
	far, err := NewLogicalMeshAt(c, Submesh{1, 8}, 8, 1, 8)
	require.NoError(t, err)
	assert.InDelta(t, 3e-6+1e9/300e9, c.SendRecvCost(a, b, 1e9), 1e-15)
	assert.InDelta(t, 10e-6+1e9/25e9, c.SendRecvCost(a, far, 1e9), 1e-15)
	assert.Zero(t, c.SendRecvCost(a, far, 0))
}
