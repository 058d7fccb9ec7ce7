package sharding

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// The MLP step at batch 1024, hidden 256 on 1×4 (α = β = 1) is data parallel when memory
// is free; the smallest-memory data-parallel plan peaks at 2,097,164 bytes per device.
// Under 1.95 MB the plan must shard: ZeRO-style, a weight is held sharded over the data
// axis, its gradient reduce-scattered, its update done on the shard, and the weight
// all-gathered where the forward uses it. Under 1 MiB no plan fits, and the error names the
// exact minimum, which is itself a feasible budget.
func TestMemoryBudgetShardsThePlan(t *testing.T) {
	g := mlpStep(t, 1024, 256, 2)
	lm := uniform(t, 1, 4)
	ctx := context.Background()
	free, err := Solve(ctx, g, lm, Options{AlpaCompute: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"grad.l2.w all_reduce axes 1 B=262144", "grad.l1.w all_reduce axes 1 B=262144"},
		describe(g, bigCollectives(g, free)))

	const budget = 1_950_000
	r, err := Solve(ctx, g, lm, Options{AlpaCompute: true, MemoryBudget: budget})
	require.NoError(t, err)
	assert.LessOrEqual(t, r.PeakMemory, int64(budget))
	assert.Greater(t, r.Cost.Total, free.Cost.Total, "memory is bought with time")
	sharded := 0
	for _, w := range []string{"l1.w", "l2.w"} {
		id := lookup(t, g, w)
		if r.Specs[id].Equal(mesh.Replicated(2)) {
			continue
		}
		sharded++
		kinds := map[string]mesh.Collective{}
		for _, c := range r.Collectives {
			kinds[g.Value(c.Value).Name] = c.Kind
		}
		assert.Equal(t, mesh.ReduceScatter, kinds["grad."+w], "gradient of %s reduce-scattered", w)
		assert.Equal(t, mesh.AllGather, kinds[w], "%s all-gathered for its use", w)
		assert.Equal(t, r.Specs[id], r.Specs[lookup(t, g, w+"_new")], "update of %s sharded like it", w)
	}
	assert.Positive(t, sharded, "some weight is sharded: %v", describe(g, r.Collectives))

	_, err = Solve(ctx, g, lm, Options{AlpaCompute: true, MemoryBudget: 1 << 20})
	var me *MemoryError
	require.True(t, errors.As(err, &me), "got %v", err)
	assert.True(t, me.Exact)
	assert.Contains(t, err.Error(), "smallest footprint of any plan is exactly 1.6 MiB (1703936 bytes")
	tight, err := Solve(ctx, g, lm, Options{AlpaCompute: true, MemoryBudget: me.Minimum})
	require.NoError(t, err, "the named minimum is itself a feasible budget")
	assert.LessOrEqual(t, tight.PeakMemory, me.Minimum)
}

func TestBadOptions(t *testing.T) {
	g := mlpStep(t, 8, 8, 2)
	lm := uniform(t, 2, 2)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{}, "no device FLOP/s"},
		{Options{DeviceFLOPS: 1, MemoryBudget: -1}, "must not be negative"},
		{Options{DeviceFLOPS: 1, Force: map[ir.ValueID]int{0: 999}}, "cannot force index 999"},
		{Options{DeviceFLOPS: 1, ForceSpec: map[ir.ValueID]mesh.Spec{0: mesh.MustParseSpec("RS01")}}, "no strategy of x produces"},
	} {
		_, err := Solve(context.Background(), g, lm, tc.opts)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}
