package mesh

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCollectiveTime(t *testing.T) {
	const a, b, B = 2.0, 0.5, 1024.0
	for _, tc := range []struct {
		k    Collective
		n    int
		want float64
	}{
		{AllReduce, 4, a + 2*b*3.0/4*B},
		{AllGather, 4, a + b*3.0/4*B},
		{ReduceScatter, 8, a + b*7.0/8*B},
		{AllToAll, 4, a + b*3.0/16*B},
		{AllReduce, 1, 0},
		{AllToAll, 1, 0},
		{Slice, 4, 0},
	} {
		assert.InDelta(t, tc.want, CollectiveTime(tc.k, tc.n, a, b, B), 1e-9, "%s n=%d", tc.k, tc.n)
	}
}

func TestBytesSent(t *testing.T) {
	// Ring accounting on 4 devices and 1 KiB: all-reduce 2·3/4, gather and
	// scatter 3/4, all-to-all 3/16.
	assert.Equal(t, 1536.0, BytesSent(AllReduce, 4, 1024))
	assert.Equal(t, 768.0, BytesSent(AllGather, 4, 1024))
	assert.Equal(t, 768.0, BytesSent(ReduceScatter, 4, 1024))
	assert.Equal(t, 192.0, BytesSent(AllToAll, 4, 1024))
	assert.Equal(t, 0.0, BytesSent(Slice, 4, 1024))
	assert.Equal(t, 0.0, BytesSent(AllReduce, 1, 1024))
}

func TestMeshCostUsesSlowerAxisForBoth(t *testing.T) {
	m, err := NewUniformMesh(2, 4, 1, 1)
	require.NoError(t, err)
	m = m.WithAxisCost(0, 10, 0.1).WithAxisCost(1, 1, 0.01)
	assert.InDelta(t, 10+0.1*0.5*800, m.Cost(AllGather, Axis0, 800), 1e-9)
	assert.InDelta(t, 1+0.01*0.75*800, m.Cost(AllGather, Axis1, 800), 1e-9)
	assert.InDelta(t, 10+0.1*7.0/8*800, m.Cost(AllGather, AxesBoth, 800), 1e-9)
}

func TestCollectiveText(t *testing.T) {
	data, err := json.Marshal([]Collective{Slice, AllGather, ReduceScatter, AllReduce, AllToAll})
	require.NoError(t, err)
	assert.Equal(t, `["slice","all_gather","reduce_scatter","all_reduce","all_to_all"]`, string(data))
	var back []Collective
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, AllToAll, back[4])
	assert.Error(t, json.Unmarshal([]byte(`["broadcast"]`), &back))
}
