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
// Under 1.95 MB the plan must shard: a weight is held sharded over the data axis, its
// gradient reduce-scattered, its update done on the shard. (Gathering the weight for its
// use, ZeRO-style, saves nothing now that the gathered copy is counted: the plan reads it
// sharded instead, and only a counted copy may be all-gathered.) Under 1 MiB no plan fits, and the error names the
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
		if kinds[w] == mesh.AllGather {
			assert.Positive(t, r.Gathered, "%s all-gathered for its use: the copy is counted", w)
		}
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

// TestGatheredParamCounted: a param stored sharded and read replicated is held in both
// layouts for the whole step (codegen's prologue gathers it once and keeps the copy until
// the update), so the plan's peak counts the gathered copy: Result.Gathered is the bytes
// of every distinct layout the chosen consumers read a param in beyond its stored one,
// and a budget one byte under the peak is refused or met by another plan, never by this
// one.
func TestGatheredParamCounted(t *testing.T) {
	g := mlpStep(t, 1024, 256, 2)
	lm := uniform(t, 1, 4)
	ctx := context.Background()
	w := lookup(t, g, "l1.w")
	opts := Options{AlpaCompute: true}
	cands, err := CandidatesWith(g, lm, opts)
	require.NoError(t, err)
	shard := mesh.Spec{Dims: []mesh.AxisSet{mesh.Axis1, mesh.AxesNone}}
	rep := mesh.Replicated(2)
	// Force w's first consumer to read it replicated, w itself stored sharded.
	u, slot := g.Users()[w][0], -1
	for i, a := range g.Value(u).Args {
		if a == w {
			slot = i
		}
	}
	k := -1
	for i, s := range cands[u] {
		if s.In[slot].Equal(rep) {
			k = i
			break
		}
	}
	require.GreaterOrEqual(t, k, 0, "%s has a strategy reading %s replicated", g.Value(u).Name, "l1.w")
	opts.Force = map[ir.ValueID]int{u: k}
	opts.ForceSpec = map[ir.ValueID]mesh.Spec{w: shard}
	r, err := Solve(ctx, g, lm, opts)
	require.NoError(t, err)
	require.True(t, r.Specs[w].Equal(shard))
	require.True(t, r.Strategies[u].In[slot].Equal(rep))

	// Independently of the planner: the distinct layouts the chosen consumers read each
	// param or state in, less the stored one.
	var want int64
	users := g.Users()
	for id := range g.Values {
		v := ir.ValueID(id)
		if op := g.Value(v).Op; op != ir.OpParam && op != ir.OpState {
			continue
		}
		seen := map[string]bool{r.Specs[v].String(): true}
		for _, c := range users[v] {
			for i, a := range g.Value(c).Args {
				if in := r.Strategies[c].In[i]; a == v && !seen[in.String()] {
					seen[in.String()] = true
					b, err := lm.LocalBytes(g.Value(v).Type.Shape, g.Value(v).Type.DType.Size(), in)
					require.NoError(t, err)
					want += b
				}
			}
		}
	}
	require.GreaterOrEqual(t, want, int64(256*256*4), "l1.w gathered: 256×256 f32")
	assert.Equal(t, want, r.Gathered)
	assert.GreaterOrEqual(t, r.PeakMemory, r.Gathered+int64(256*256*4/4), "the shard and the copy, at least")

	// A budget under the peak: this plan no longer fits (the rows count the copy).
	opts.MemoryBudget = r.PeakMemory - 1
	tight, err := Solve(ctx, g, lm, opts)
	if err == nil {
		assert.LessOrEqual(t, tight.PeakMemory, opts.MemoryBudget)
	} else {
		var me *MemoryError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, r.PeakMemory, me.Minimum, "the minimum is the forced plan's own peak, copy included")
	}
}

// A recomputing stage's live ranges follow codegen's order: the forward, then, before the
// first backward op that reads a recomputed value, the recomputation of its segment; the
// recomputed values live in the forward until their last forward read and again from
// their recomputation, and a value the recomputation reads (x) lives until then.
func TestLivenessRecomputing(t *testing.T) {
	b := newGB(t, "remat")
	x := b.input("x", 4, 4)                   // 0
	a := b.op(ir.OpRelu, "a", nil, x)         // 1
	c := b.op(ir.OpRelu, "c", nil, a)         // 2
	loss := b.op(ir.OpMul, "loss", nil, c, c) // 3
	dc := b.op(ir.OpMul, "dc", nil, c, c)     // 4: the backward reads c
	da := b.op(ir.OpMul, "da", nil, a, dc)    // 5: and a
	b.g.Outputs = []ir.Output{{Value: loss}}
	rc := &Recompute{Redo: []bool{false, true, true, false, false, false},
		Backward: []bool{false, false, false, false, true, true}, Segment: make([]int, 6)}
	plain := liveness(b.g, nil)
	require.Equal(t, 6, plain.points)
	require.Equal(t, []int{1, 5, 4, 5, 5, 5}, plain.last)
	lr := liveness(b.g, rc)
	// Points: x a c loss | a' c' | dc da.
	require.Equal(t, 8, lr.points)
	require.Equal(t, []int{0, 1, 2, 3, 6, 7}, lr.first)
	require.Equal(t, []int{4, 2, 3, 7, 7, 7}, lr.last, "x until the recomputation of a; a and c until their forward reads")
	require.Equal(t, []int{-1, 4, 5, -1, -1, -1}, lr.again)
	require.Equal(t, []int{-1, 7, 6, -1, -1, -1}, lr.lastAgain)
	require.Equal(t, ir.ValueID(5), da)

	bad := &Recompute{Redo: make([]bool, 5), Backward: make([]bool, 6), Segment: make([]int, 6)}
	require.EqualError(t, bad.check(b.g), "sharding: recomputation marks for 5, 6 and 6 values of the 6 of remat")
	bad = &Recompute{Redo: []bool{true, false, false, false, false, false}, Backward: make([]bool, 6), Segment: make([]int, 6)}
	require.EqualError(t, bad.check(b.g), "sharding: x of remat is marked recomputed but is a backward op or a leaf")
	cl, err := mesh.ParseCluster("cpu:1")
	require.NoError(t, err)
	lm, err := mesh.NewLogicalMesh(cl, mesh.Submesh{Hosts: 1, Devices: 1}, 1, 1)
	require.NoError(t, err)
	_, err = Solve(context.Background(), b.g, lm, Options{DeviceFLOPS: 1, Recompute: bad})
	require.ErrorContains(t, err, "marked recomputed")
}
