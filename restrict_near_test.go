package autopar

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
)

// TestNearRestricted: markNear marks a restricted (inexact) stage of the optimistic plan
// that its re-cost ran within refineTolerance of its bound, time and step, and only such a
// stage; farFrom leaves the marked stages out, so that openRestricted solves the range
// ILPs of the others first (exactly).
func TestNearRestricted(t *testing.T) {
	o := &oracle{shared: newShared()}
	o.restricted = map[rangeKey]*stageSolution{}
	o.exactAt = map[rangeKey]composedCost{}
	sub, lg := mesh.Submesh{Hosts: 1, Devices: 2}, mesh.LogicalShape{1, 2}
	stage := func(a, b int, t, u float64) dp.Stage {
		return dp.Stage{Start: a, End: b, Submesh: sub, Logical: lg, Cost: dp.StageCost{Time: t, Step: u}}
	}
	key := func(a, b int) rangeKey { return rangeKey{a, b, sub, lg} }
	opt := &dp.Result{Stages: []dp.Stage{stage(0, 2, 1, 0.1), stage(2, 4, 1, 0.1), stage(4, 6, 1, 0.1), stage(6, 8, 1, 0.1), stage(8, 9, 1, 0.1)}}
	res := &dp.Result{Stages: []dp.Stage{
		stage(0, 2, 1.001, 0.1),   // restricted, within the tolerance: near
		stage(2, 4, 1.01, 0.1),    // restricted, its time 1 % over: far
		stage(4, 6, 1, 0.11),      // restricted, its step 10 % over: far
		stage(6, 8, 1.0001, 0.1),  // restricted but already exact (openRestricted ran): not marked
		stage(8, 9, 1.0001, 0.1)}} // not restricted
	for _, k := range []rangeKey{key(0, 2), key(2, 4), key(4, 6), key(6, 8)} {
		o.restricted[k] = &stageSolution{ok: true}
	}
	o.exactAt[key(6, 8)] = composedCost{ok: true, exact: true}
	near := map[rangeKey]bool{}
	o.markNear(opt, res, near)
	assert.Equal(t, map[rangeKey]bool{key(0, 2): true}, near)
	far := farFrom(opt, near)
	require.Len(t, far.Stages, 4)
	assert.Equal(t, 2, far.Stages[0].Start)
	assert.Len(t, opt.Stages, 5, "opt itself unchanged")
	// A re-cost of other stages (not pinned to opt's) marks nothing.
	o.markNear(opt, &dp.Result{Stages: res.Stages[:2]}, near)
	assert.Len(t, near, 1)
}

// TestRestrictedSearchWithinTolerance: with every range of two layers or more priced by
// its restricted plan (restrictVars 0, as the big models' ranges are), the fast search's
// plan stays within 1 % of the exhaustive search's (TestFastSearchMatchesExhaustive's
// contract): exactly re-costs an optimistic plan with restricted stages before it opens
// them, and opens the ones its re-cost ran near their bound last. The dgx-a100 case, the
// one whose exactly re-costs and opens restricted stages, runs with -fastsearch.all.
func TestRestrictedSearchWithinTolerance(t *testing.T) {
	defer func(v int) { restrictVars = v }(restrictVars)
	for _, tc := range fastCases {
		if tc.layers < 3 || tc.b == 0 || tc.memory == 0 {
			continue // one-layer ranges are not restricted; auto counts are slower; unbound relaxed ranges fit
		}
		if tc.cluster == "dgx-a100" && !*fastSearchAll {
			continue // 15-35 s on the shared machine: with -fastsearch.all (the one case that opens restricted stages)
		}
		name := fmt.Sprintf("%s/%s/%dx%d/L%d/B%d/mem%d", tc.model, tc.cluster, tc.hosts, tc.devices, tc.layers, tc.b, tc.memory)
		t.Run(name, func(t *testing.T) {
			g, err := frontend.ParseFile("testdata/models/" + tc.model + ".ir")
			require.NoError(t, err)
			c, err := mesh.ParseCluster(tc.cluster)
			require.NoError(t, err)
			c.Hosts, c.DevicesPerHost = tc.hosts, tc.devices
			opts := Options{Layers: tc.layers, Microbatches: tc.b, MemoryPerDevice: tc.memory}
			restrictVars = 10000
			opts.Search = SearchExhaustive
			ex, _, err := compileSearch(context.Background(), g, c, opts)
			require.NoError(t, err)
			restrictVars = 0
			opts.Search = SearchFast
			fast, st, err := compileSearch(context.Background(), g, c, opts)
			require.NoError(t, err)
			t.Logf("exhaustive %g, fast (restricted) %g, %d ILPs", ex.Predicted.StepTime, fast.Predicted.StepTime, st.solves)
			assert.LessOrEqual(t, fast.Predicted.StepTime, ex.Predicted.StepTime*(1+restrictTolerance))
		})
	}
}
