package ilp

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loose solves a with a memory budget no choice exceeds and returns the solution, whose
// Basis (nil when lp_solve branched) starts the re-solves under tighter budgets.
func loose(t *testing.T, a *alpaInstance) *Solution {
	t.Helper()
	budget := a.budget
	defer func() { a.budget = budget }()
	a.budget = 0
	for _, m := range a.mem {
		a.budget += maxOf(m)
	}
	p, _ := a.problem()
	return solveOK(t, p)
}

// A solve started from an earlier optimum's basis, after the memory row's right-hand side
// changed, proves the optimum a cold solve and brute force find, infeasibility included.
func TestWarmStartMatchesColdAndBruteForce(t *testing.T) {
	warm := 0
	for seed := range uint64(16) {
		a := randomAlpa(6+int(seed%3), 3, seed)
		start := loose(t, a).Basis
		if start == nil {
			continue // the loose problem branched: no basis to start from
		}
		lo, hi := 0.0, 0.0
		for _, m := range a.mem {
			lo, hi = lo+minOf(m), hi+maxOf(m)
		}
		for _, f := range []float64{-0.1, 0, 0.2, 0.5, 0.8} {
			a.budget = lo + f*(hi-lo)
			p, s := a.problem()
			want := a.bruteForce()
			cold, errCold := Solve(context.Background(), p, Options{})
			sol, err := Solve(context.Background(), p, Options{Start: start})
			if f < 0 {
				require.ErrorIs(t, errCold, ErrInfeasible, "seed %d", seed)
				require.ErrorIs(t, err, ErrInfeasible, "seed %d", seed)
				continue
			}
			require.NoError(t, errCold, "seed %d budget %g", seed, a.budget)
			require.NoError(t, err, "seed %d budget %g", seed, a.budget)
			warm++
			assert.Equal(t, Optimal, sol.Status)
			requireSolutionChecks(t, p, sol)
			assert.InDelta(t, want, sol.Objective, 1e-6, "seed %d budget %g", seed, a.budget)
			assert.InDelta(t, cold.Objective, sol.Objective, 1e-6, "seed %d budget %g", seed, a.budget)
			got, fits := a.cost(choiceOf(sol, s))
			assert.True(t, fits, "seed %d: decoded choice breaks the memory budget", seed)
			assert.InDelta(t, want, got, 1e-6, "seed %d", seed)
		}
	}
	t.Logf("%d warm solves", warm)
	assert.Greater(t, warm, 20, "too few seeds had an integral root to start from")
}

// A start for a prefix of the problem: rows and variables appended after the solve it
// came from start basic and at their lower bounds. The optimum is a cold solve's, and a
// start from a problem's own optimal basis needs no simplex iteration at all.
func TestWarmStartAppendedRowsAndVars(t *testing.T) {
	var last Stats
	defer Trace(func(_ *Problem, st Stats) { last = st })()
	tried := 0
	for seed := range uint64(12) {
		a := randomAlpa(10, 3, 100+seed)
		p, s := a.problem()
		first := solveOK(t, p)
		if first.Basis == nil {
			continue
		}
		tried++
		_, _, err := solve(context.Background(), p, Options{Start: first.Basis})
		require.NoError(t, err)
		assert.Zero(t, last.Iterations, "seed %d: the start is the final basis of the same problem", seed)

		// Forbid the strategies chosen at the first two nodes through a new variable:
		// z ≥ s[0][c0] + s[1][c1] - 1, z ≤ 0.
		c := choiceOf(first, s)
		z := p.AddContinuous("z", 0, 0)
		p.AddRow("cut", []Term{{z, 1}, {s[0][c[0]], -1}, {s[1][c[1]], -1}}, GE, -1)
		cold, errCold := Solve(context.Background(), p, Options{})
		sol, err := Solve(context.Background(), p, Options{Start: first.Basis})
		if errors.Is(errCold, ErrInfeasible) {
			require.ErrorIs(t, err, ErrInfeasible)
			continue
		}
		require.NoError(t, errCold)
		require.NoError(t, err)
		requireSolutionChecks(t, p, sol)
		assert.InDelta(t, cold.Objective, sol.Objective, 1e-6, "seed %d", seed)
		assert.GreaterOrEqual(t, sol.Objective, first.Objective-1e-6, "seed %d", seed)
		again, _, err := solve(context.Background(), p, Options{Start: first.Basis})
		require.NoError(t, err)
		assert.Equal(t, sol.Values, again.Values, "seed %d: a warm start is deterministic", seed)
	}
	t.Logf("%d problems with a start", tried)
	assert.Greater(t, tried, 3, "too few seeds had an integral root to start from")
}

// The memo keys a warm-started solve on its start too: a cold answer is never served to a
// warm solve (it may be another optimum) nor a warm one to a cold solve, and a repeated
// warm solve is served from the memo.
func TestWarmStartMemo(t *testing.T) {
	var cached []bool
	defer Trace(func(_ *Problem, st Stats) { cached = append(cached, st.Cached) })()
	a := randomAlpa(14, 3, 77)
	start := loose(t, a).Basis
	require.NotNil(t, start)
	p, _ := a.problem()
	cached = nil
	for _, o := range []Options{{}, {Start: start}, {Start: start}, {}} {
		_, err := Solve(context.Background(), p, o)
		require.NoError(t, err)
	}
	assert.Equal(t, []bool{false, false, true, true}, cached)
}

// A start that is no basis of the problem is refused with an error naming what is wrong,
// before lp_solve runs.
func TestWarmStartBadBasis(t *testing.T) {
	a := randomAlpa(5, 2, 3)
	sol := loose(t, a)
	require.NotNil(t, sol.Basis)
	p, _ := a.problem()
	small, _ := randomAlpa(4, 2, 3).problem()
	_, err := Solve(context.Background(), small, Options{Start: sol.Basis})
	assert.ErrorContains(t, err, "larger than the problem")

	b := &Basis{Vars: append([]BasisStatus(nil), sol.Basis.Vars...), Rows: append([]BasisStatus(nil), sol.Basis.Rows...)}
	for i := range b.Rows {
		b.Rows[i] = Basic // every slack basic and some columns too: too many
	}
	_, err = Solve(context.Background(), p, Options{Start: b})
	assert.ErrorContains(t, err, "basic entries")
	b.Rows[0] = 7
	_, err = Solve(context.Background(), p, Options{Start: b})
	assert.ErrorContains(t, err, "unknown status 7")
}
