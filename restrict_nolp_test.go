package autopar

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

// TestRangeRelaxedWithoutLP: a range's relaxed solve on a two-dimensional mesh above
// rangeLPVars variables (here every one: the floor at 0) never reaches lp_solve; where the
// certificate answers it, the answer is the one lp_solve's solve gives (the same price and
// fit), and where it does not, there is no answer, as at lp_solve's limit. Under
// LPSolveOnly lp_solve answers it as before, and a one-dimensional mesh's range keeps
// lp_solve.
func TestRangeRelaxedWithoutLP(t *testing.T) {
	defer func(v int) { rangeLPVars = v }(rangeLPVars)
	var calls atomic.Int64
	defer ilp.Trace(func(_ *ilp.Problem, st ilp.Stats) {
		if !st.Cached {
			calls.Add(1)
		}
	})()
	twoD, answered, lpOnly := 0, 0, 0
	for _, tc := range []boundCase{
		{"mlp-tiny", "cpu", 1, 4, 4, 3},
	} {
		t.Run(tc.name(), func(t *testing.T) {
			o0, dc := tc.oracle(t)
			L := o0.lay.L
			for _, mk := range o0.meshes(dc) {
				for start := 0; start < L; start++ {
					for end := start + 2; end <= L; end++ {
						at := fmt.Sprintf("[%d,%d) %v %v", start, end, mk.sub, mk.logical)
						solve := func(floor int, only bool) (*stageSolution, int64) {
							rangeLPVars = floor
							o, _ := tc.oracle(t)
							o.lpOnly = only
							sg, err := o.stage(start, end)
							require.NoError(t, err, at)
							calls.Store(0)
							r := o.rangeRelaxed(sg, mk.sub, mk.logical)
							return r, calls.Load()
						}
						ref, _ := solve(1<<30, false)
						got, n := solve(0, false)
						if meshFactor(mk.logical) <= 4 {
							assert.Equal(t, ref != nil, got != nil, at)
							continue
						}
						twoD++
						assert.Zero(t, n, "%s: lp_solve ran", at)
						if got != nil {
							answered++
							require.NotNil(t, ref, at)
							assert.InEpsilon(t, ref.cost.Time+ref.cost.Step, got.cost.Time+got.cost.Step, 1e-9, at)
							assert.Equal(t, ref.exact, got.exact, at)
						}
						if only, n := solve(0, true); only != nil || n > 0 {
							lpOnly++
						}
					}
				}
			}
		})
	}
	t.Logf("%d ranges on 2-D meshes, %d answered by the certificate, %d given to lp_solve under LPSolveOnly", twoD, answered, lpOnly)
	assert.Positive(t, twoD)
	assert.Positive(t, lpOnly)
}

// TestRestrictedCapped: a restricted solve (restrictStage) capped at restrictIterations,
// however low the cap (one iteration: the Lagrangian's plan or the uncapped fallback),
// prices the whole step's range wherever the uncapped one does, by a plan of the range
// never below its range ILP's optimum, under a budget that binds (97 % of the relaxed
// plan's peak).
func TestRestrictedCapped(t *testing.T) {
	defer func(v int, c int64) { restrictVars, restrictIterations = v, c }(restrictVars, restrictIterations)
	restrictVars = 0
	tc := boundCase{"mlp-tiny", "cpu", 1, 4, 4, 3}
	o0, dc := tc.oracle(t)
	restricted := 0
	for _, mk := range o0.meshes(dc) {
		if mk.sub.NumDevices() == 1 {
			continue
		}
		at := fmt.Sprintf("%v %v", mk.sub, mk.logical)
		L := o0.lay.L
		k := rangeKey{0, L, mk.sub, mk.logical}
		price := func(cap int64) (*stageSolution, *stageSolution) {
			restrictIterations = cap
			o, _ := tc.oracle(t)
			o.mb, o.fast = tc.b, true
			sg, err := o.stage(0, L)
			require.NoError(t, err, at)
			free := o.solveRelaxed(sg, mk.sub, mk.logical)
			require.True(t, free.ok, at)
			o.memory = free.res.PeakMemory * 97 / 100
			sg, err = o.stage(0, L)
			require.NoError(t, err, at)
			full := o.solveStage(sg, mk.sub, mk.logical)
			if !full.ok || full.res == nil {
				return nil, nil
			}
			if cc := o.composed(0, L, mk.sub, mk.logical); !cc.ok || !o.restrictStage(0, L, mk.sub, mk.logical) {
				return full, nil
			}
			r := o.restricted[k]
			assert.GreaterOrEqual(t, o.weighed(r), o.weighed(full)*(1-1e-9), "%s: cap %d: a plan of the range", at, cap)
			return full, r
		}
		_, uncapped := price(0)
		for _, cap := range []int64{1, leanIterations} {
			_, r := price(cap)
			assert.Equal(t, uncapped != nil, r != nil, "%s: cap %d: restricted", at, cap)
			if r != nil {
				restricted++
			}
		}
	}
	t.Logf("%d capped restricted solves", restricted)
	assert.Positive(t, restricted)
}
