package sharding

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLagGapNeverWrong: nearLag (Options.LagGap) accepts a Lagrangian search's plan only
// where it fits and its energy is within the gap of the constrained optimum. On random
// energies with memory rows small enough to enumerate (randomLagProblem), under budgets
// between the least peak and the free plan's, every plan nearLag accepts at gaps of
// 0.1 %, 1 % and 5 % fits, is no better than the brute-force optimum and is within the
// gap of it (ub − opt ≤ gap·ub); some are accepted that the closed test (lp_solve's gaps)
// is not. Mutations caught: nearLag accepting any plan that fits; the gap read ×20.
func TestLagGapNeverWrong(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 9))
	accepted, open := 0, 0
	const trials = 300
	for trial := range trials {
		lp, _, _, opt := budgetedLagProblem(r, trial)
		res := lagSearch(*lp, nil)
		for _, gap := range []float64{1e-3, 0.01, 0.05} {
			if !nearLag(res, gap) {
				continue
			}
			name := fmt.Sprintf("trial %d, gap %g: budget %g, optimum %g, plan %g, bound %g", trial, gap, lp.budget, opt, res.ub, res.lb)
			accepted++
			if !res.closed {
				open++
			}
			_, pk := lp.peak(res.x)
			require.LessOrEqual(t, pk, lp.budget, name)
			require.GreaterOrEqual(t, res.ub, opt-1e-9, name)
			require.LessOrEqual(t, res.ub, opt+gap*math.Abs(res.ub)+1e-9, name)
		}
	}
	assert.Positive(t, open, "some plans accepted within a gap that the closed test would not accept")
	assert.Positive(t, accepted)
	t.Logf("%d acceptances of %d searches × 3 gaps, %d of them open", accepted, trials, open)
}

// TestLagGapAnswers: on a real planner (mlp-tiny on 2×2 under 95 % of its free plan's
// peak, where the Lagrangian's plan is within 2.1 % of its bound and is lp_solve's
// optimum), Solve with LagGap 5 % answers with the Lagrangian's plan ("feasible",
// Solver "lagrange", its Bound at most lp_solve's optimum, the plan within the gap of it
// and fitting); with LagGap 0.1 % or the ILP at most LagGapAbove variables, lp_solve
// answers as before.
func TestLagGapAnswers(t *testing.T) {
	_, lm := benchMesh(t, "dgx-a100", 2, 2)
	g := tinyStep(t, "mlp-tiny")
	base := Options{DeviceFLOPS: 1e9}
	free, err := Solve(context.Background(), g, lm, base)
	require.NoError(t, err)
	base.MemoryBudget = free.PeakMemory * 95 / 100
	lpo := base
	lpo.LPSolveOnly = true
	lp, err := Solve(context.Background(), g, lm, lpo)
	require.NoError(t, err)
	require.Equal(t, "optimal", lp.ILP.Status)
	tol := max(mpGapAbs, mpGapRel*math.Abs(lp.ILP.Objective)) + 1e-12*math.Abs(lp.ILP.Objective)

	opts := base
	opts.LagGap = 0.05
	got, err := Solve(context.Background(), g, lm, opts)
	require.NoError(t, err)
	require.Equal(t, "lagrange", got.ILP.Solver)
	require.Equal(t, "feasible", got.ILP.Status)
	require.LessOrEqual(t, got.PeakMemory, opts.MemoryBudget)
	assert.LessOrEqual(t, got.ILP.Bound, lp.ILP.Objective+tol)
	assert.LessOrEqual(t, got.ILP.Objective-got.ILP.Bound, opts.LagGap*got.ILP.Objective+tol)
	assert.GreaterOrEqual(t, got.ILP.Objective, lp.ILP.Objective-tol)
	t.Logf("the Lagrangian's plan %.9g, bound %.9g, lp_solve %.9g", got.ILP.Objective, got.ILP.Bound, lp.ILP.Objective)

	for _, o := range []Options{{LagGap: 1e-3}, {LagGap: 0.05, LagGapAbove: got.ILP.Variables + 1_000_000}} {
		opts := base
		opts.LagGap, opts.LagGapAbove = o.LagGap, o.LagGapAbove
		res, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err)
		assert.Equal(t, "lp_solve", res.ILP.Solver, "gap %g above %d", o.LagGap, o.LagGapAbove)
		assert.InDelta(t, lp.ILP.Objective, res.ILP.Objective, tol)
	}
}
