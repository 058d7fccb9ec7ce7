package dp

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// withRemat is uniform with a recomputing alternative: 1.5× the time, inputs of 0.25 per
// micro-batch in flight and one micro-batch's activations (1) held once.
func withRemat(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
	c, ok := uniform(k, i, s, l)
	c.Remat = []StageCost{{Time: 1.5 * c.Time, WeightBytes: c.WeightBytes, ActBytes: 0.25, OnceBytes: c.ActBytes, Recompute: true}}
	return c, ok
}

// TestRematWhenMemoryForces: one layer on two devices with GPipe and 8 micro-batches
// needs 10+8·1 = 18 bytes plainly and 10+8·0.25+1 = 13 recomputing. With 20 bytes the
// search keeps the faster plain stage; with 14 it recomputes; with 12.5 nothing fits and
// the memory error names 13, the recomputing stage's need.
func TestRematWhenMemoryForces(t *testing.T) {
	solve := func(mem float64) (*Result, error) {
		c := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: mem}
		return Solve(context.Background(), 1, c, oracleFunc(withRemat), Options{Microbatches: 8, Schedule: program.GPipe})
	}
	r, err := solve(20)
	require.NoError(t, err)
	require.Len(t, r.Stages, 1)
	assert.False(t, r.Stages[0].Cost.Recompute)
	assert.Equal(t, 18.0, r.Stages[0].Memory)
	assert.InDelta(t, 8*0.6, r.Time, 1e-12)

	r, err = solve(14)
	require.NoError(t, err)
	require.Len(t, r.Stages, 1)
	assert.True(t, r.Stages[0].Cost.Recompute)
	assert.Equal(t, 13.0, r.Stages[0].Memory)
	assert.InDelta(t, 8*1.5*0.6, r.Time, 1e-12)
	assert.Nil(t, r.Stages[0].Cost.Remat)

	_, err = solve(12.5)
	var me *MemoryError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, 13.0, me.Need)
}

func TestRematCostValidated(t *testing.T) {
	bad := func(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
		c, ok := withRemat(k, i, s, l)
		c.Remat[0].OnceBytes = -1
		return c, ok
	}
	c := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: 100}
	_, err := Solve(context.Background(), 2, c, oracleFunc(bad), Options{Microbatches: 2})
	require.ErrorContains(t, err, "activations held once -1")
}

// TestRematChoices: with two recomputing costs the search takes the fastest that fits:
// plain (18 bytes) at 20, checkpointed layers (1.4×, 10+8·0.5+0.2 = 14.2) at 15, the
// whole stage (1.5×, 13) at 14.
func TestRematChoices(t *testing.T) {
	two := func(k, i int, s mesh.Submesh, l mesh.LogicalShape) (StageCost, bool) {
		c, ok := withRemat(k, i, s, l)
		c.Remat = append(c.Remat, StageCost{Time: 1.4 * c.Time, WeightBytes: c.WeightBytes, ActBytes: 0.5, OnceBytes: 0.2,
			Recompute: true, Checkpoints: true})
		return c, ok
	}
	for _, tc := range []struct {
		mem               float64
		remat, checkpoint bool
		need              float64
	}{{20, false, false, 18}, {15, true, true, 14.2}, {14, true, false, 13}} {
		c := Cluster{Hosts: 1, DevicesPerHost: 2, MemoryPerDevice: tc.mem}
		r, err := Solve(context.Background(), 1, c, oracleFunc(two), Options{Microbatches: 8, Schedule: program.GPipe})
		require.NoError(t, err)
		require.Len(t, r.Stages, 1)
		assert.Equal(t, tc.remat, r.Stages[0].Cost.Recompute, "%g bytes", tc.mem)
		assert.Equal(t, tc.checkpoint, r.Stages[0].Cost.Checkpoints, "%g bytes", tc.mem)
		assert.InDelta(t, tc.need, r.Stages[0].Memory, 1e-9, "%g bytes", tc.mem)
	}
}
