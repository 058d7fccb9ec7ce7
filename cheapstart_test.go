package autopar

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/passes/sharding"
)

// TestCheapStart: exactly re-costs the optimistic plan first (cheapStart) only where the
// fast plan's re-cost would solve a restricted range under the memory (its relaxed solve
// does not fit) and every stage of the optimistic plan, a different plan, is priced
// already (no ILP in its re-cost); and allSolved asks unsolved without leaving its marks.
// mlp-tiny's ranges fit relaxed, so a misfit relaxed solve is planted for the fast plan's
// stage (zero cost: it raises no bound).
func TestCheapStart(t *testing.T) {
	defer func(v int) { restrictVars = v }(restrictVars)
	restrictVars = 0 // the tiny model's ranges are below the floor
	for _, tc := range composeCases {
		t.Run(tc.model, func(t *testing.T) { testCheapStart(t, tc) })
	}
}

func testCheapStart(t *testing.T, tc boundCase) {
	o, dc := tc.oracle(t)
	ctx := context.Background()
	do := dp.Options{Microbatches: tc.b}
	o.fast = true
	L := o.lay.L

	// allSolved marks nothing: a whole-network stage on every mesh, one with layers
	// unsolved at least, leaves o.solved and o.relaxed as they were.
	unsolvedSeen := false
	for _, mk := range o.meshes(dc) {
		p := &dp.Result{Stages: []dp.Stage{{Start: 0, End: L, Submesh: mk.sub, Logical: mk.logical}}}
		ns, nr := len(o.solved), len(o.relaxed)
		if !o.allSolved(p) {
			unsolvedSeen = true
		}
		assert.Equal(t, ns, len(o.solved), "allSolved left a solve mark on %v", mk)
		assert.Equal(t, nr, len(o.relaxed), "allSolved left a relaxed mark on %v", mk)
	}
	require.True(t, unsolvedSeen, "some mesh has unsolved layers before settle")

	o.settle(ctx, L, dc, do, nil)
	opt, err := o.optimisticPlan(ctx, L, dc, do)
	require.NoError(t, err)
	require.True(t, o.allSolved(opt))
	// The fast plan: the whole network on a mesh opt does not run, composed.
	var fast *dp.Result
	var fastKey solveKey
	for _, mk := range o.meshes(dc) {
		if len(opt.Stages) == 1 && opt.Stages[0].Submesh == mk.sub && opt.Stages[0].Logical == mk.logical {
			continue
		}
		if !o.composed(0, L, mk.sub, mk.logical).ok {
			continue
		}
		sg, err := o.stage(0, L)
		require.NoError(t, err)
		fast = &dp.Result{Stages: []dp.Stage{{Start: 0, End: L, Submesh: mk.sub, Logical: mk.logical}}}
		fastKey = solveKey{sg.hash, mk.sub, mk.logical}
		break
	}
	require.NotNil(t, fast, "a composed whole-network stage opt does not run")

	// fast's relaxed solve fits: its re-cost solves nothing dear.
	o.relaxed[fastKey] = &stageSolution{ok: true, res: &sharding.Result{}, exact: true}
	assert.Nil(t, o.cheapStart(ctx, L, dc, do, fast), "fast's range fits relaxed")
	// It does not fit: opt, priced already, first.
	o.relaxed[fastKey] = &stageSolution{ok: true, res: &sharding.Result{}}
	got := o.cheapStart(ctx, L, dc, do, fast)
	require.NotNil(t, got, "opt %s, fast %s", stagesOf(opt), stagesOf(fast))
	assert.Equal(t, stagesOf(opt), stagesOf(got))
	// fast is opt's plan: nothing dear to spare.
	assert.Nil(t, o.cheapStart(ctx, L, dc, do, got), "fast runs opt's stages")
	// A stage of opt priced by its layer's points but not solved as a stage: its re-cost
	// would run the stage's ILP.
	for _, st := range got.Stages {
		sg, err := o.stage(st.Start, st.End)
		require.NoError(t, err)
		k := solveKey{sg.hash, st.Submesh, st.Logical}
		sol, solved := o.solved[k]
		if !solved || o.exactAt[stageKey(st)].exact {
			continue
		}
		delete(o.solved, k)
		if o.allSolved(got) {
			assert.Nil(t, o.cheapStart(ctx, L, dc, do, fast), "opt's stage %d-%d not solved", st.Start, st.End)
		}
		o.solved[k] = sol
	}
	require.NotNil(t, o.cheapStart(ctx, L, dc, do, fast))
	// opt's own multi-layer stage does not fit relaxed either: its re-cost is as dear.
	planted := 0
	for _, st := range got.Stages {
		if st.End-st.Start < 2 {
			continue
		}
		sg, err := o.stage(st.Start, st.End)
		require.NoError(t, err)
		k := solveKey{sg.hash, st.Submesh, st.Logical}
		if _, ok := o.restrictable(stageKey(st)); ok.ok {
			delete(o.solved, k)
			o.relaxed[k] = &stageSolution{ok: true, res: &sharding.Result{}}
			planted++
		}
	}
	t.Logf("opt %s, fast %s, %d stages planted", stagesOf(opt), stagesOf(fast), planted)
	if planted > 0 {
		assert.Nil(t, o.cheapStart(ctx, L, dc, do, fast), "opt's stage is memory-bound too")
	}
}
