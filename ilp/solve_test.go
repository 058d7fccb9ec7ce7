package ilp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func solveOK(t *testing.T, p *Problem) *Solution {
	t.Helper()
	sol, err := Solve(context.Background(), p, Options{})
	require.NoError(t, err)
	require.Equal(t, Optimal, sol.Status)
	requireSolutionChecks(t, p, sol)
	return sol
}

// The textbook LP max 3x+2y s.t. x+y<=4, x+3y<=6, x<=3 has its optimum at
// the vertex (3, 1) with value 11.
func TestSolveTinyLP(t *testing.T) {
	var p Problem
	x := p.AddContinuous("x", 0, 3)
	y := p.AddContinuous("y", 0, math.Inf(1))
	p.AddRow("c1", []Term{{x, 1}, {y, 1}}, LE, 4)
	p.AddRow("c2", []Term{{x, 1}, {y, 3}}, LE, 6)
	p.SetObjective([]Term{{x, -3}, {y, -2}}, 0)
	sol := solveOK(t, &p)
	assert.InDelta(t, 3, sol.Value(x), 1e-9)
	assert.InDelta(t, 1, sol.Value(y), 1e-9)
	assert.InDelta(t, -11, sol.Objective, 1e-9)
}

// An equality row, a GE row, negative and free bounds, and the objective
// constant: min x + 2y + 10 s.t. x + y = 1, x - y >= -3, x in [-5, 5],
// y free. Optimum moves y as low as allowed: y = -2 gives x = 3? No: x - y
// >= -3 with x = 1 - y means 1 - 2y >= -3, y <= 2; the objective
// 1 - y + 2y + 10 = 11 + y falls with y, and x = 1 - y <= 5 gives y >= -4.
func TestSolveEqualityGEAndFreeBounds(t *testing.T) {
	var p Problem
	x := p.AddContinuous("x", -5, 5)
	y := p.AddContinuous("y", math.Inf(-1), math.Inf(1))
	p.AddRow("sum", []Term{{x, 1}, {y, 1}}, EQ, 1)
	p.AddRow("diff", []Term{{x, 1}, {y, -1}}, GE, -3)
	p.SetObjective([]Term{{x, 1}, {y, 2}}, 10)
	sol := solveOK(t, &p)
	assert.InDelta(t, 5, sol.Value(x), 1e-9)
	assert.InDelta(t, -4, sol.Value(y), 1e-9)
	assert.InDelta(t, 7, sol.Objective, 1e-9)
}

// Integer variables keep fractional bounds: min z with z in [-2.5, 7] is -2.
func TestSolveIntegerBounds(t *testing.T) {
	var p Problem
	z := p.AddInteger("z", -2.5, 7)
	w := p.AddInteger("w", 0, math.Inf(1))
	p.AddRow("", []Term{{w, 2}}, GE, 3) // w >= 1.5 → 2
	p.SetObjective([]Term{{z, 1}, {w, 1}}, 0)
	sol := solveOK(t, &p)
	assert.Equal(t, -2.0, sol.Value(z))
	assert.Equal(t, 2.0, sol.Value(w))
}

// A variable named twice in a row has its coefficients added:
// x + x <= 1 caps x at 0.5.
func TestSolveDuplicateTerms(t *testing.T) {
	var p Problem
	x := p.AddContinuous("x", 0, 10)
	p.AddRow("dup", []Term{{x, 1}, {x, 1}, {x, 0}}, LE, 1)
	p.SetObjective([]Term{{x, -1}, {x, -1}}, 0)
	sol := solveOK(t, &p)
	assert.InDelta(t, 0.5, sol.Value(x), 1e-9)
	assert.InDelta(t, -1, sol.Objective, 1e-9)
}

func TestSolveEmptyProblem(t *testing.T) {
	var p Problem
	p.SetObjective(nil, 4)
	sol := solveOK(t, &p)
	assert.Empty(t, sol.Values)
	assert.Equal(t, 4.0, sol.Objective)
}

// The classic 0/1 knapsack: values 60, 100, 120, weights 10, 20, 30,
// capacity 50; the best is items 2 and 3 worth 220.
func TestSolveKnapsackKnown(t *testing.T) {
	var p Problem
	values, weights := []float64{60, 100, 120}, []float64{10, 20, 30}
	var row, obj []Term
	for i := range values {
		v := p.AddBinary(fmt.Sprintf("item%d", i))
		row, obj = append(row, Term{v, weights[i]}), append(obj, Term{v, -values[i]})
	}
	p.AddRow("capacity", row, LE, 50)
	p.SetObjective(obj, 0)
	sol := solveOK(t, &p)
	assert.Equal(t, []float64{0, 1, 1}, sol.Values)
	assert.Equal(t, -220.0, sol.Objective)
}

// Random knapsacks against the textbook dynamic program.
func TestSolveKnapsackMatchesDP(t *testing.T) {
	for seed := range uint64(20) {
		r := newRand(seed)
		p, values, weights, capacity := randomKnapsack(r, 12+r.IntN(8), 30+r.IntN(60))
		sol := solveOK(t, p)
		assert.Equal(t, -float64(knapsackDP(values, weights, capacity)), sol.Objective, "seed %d", seed)
	}
}

func knapsackDP(values, weights []int, capacity int) int {
	best := make([]int, capacity+1)
	for i := range values {
		for c := capacity; c >= weights[i]; c-- {
			best[c] = max(best[c], best[c-weights[i]]+values[i])
		}
	}
	return best[capacity]
}

// Random assignment problems against brute force over all n! assignments,
// written once with equality rows and once with GE rows for workers and LE
// rows for jobs (same optimum for nonnegative costs).
func TestSolveAssignmentMatchesBruteForce(t *testing.T) {
	for seed := range uint64(12) {
		r := newRand(seed)
		n := 3 + int(seed%4)
		cost := make([][]float64, n)
		for i := range cost {
			for range n {
				cost[i] = append(cost[i], float64(r.IntN(100)))
			}
		}
		want := math.Inf(1)
		permutations(n, func(perm []int) {
			sum := 0.0
			for i, j := range perm {
				sum += cost[i][j]
			}
			want = math.Min(want, sum)
		})
		for _, senses := range [][2]Sense{{EQ, EQ}, {GE, LE}} {
			p, x := assignmentProblem(cost, senses[0], senses[1])
			sol := solveOK(t, p)
			assert.Equal(t, want, sol.Objective, "seed %d senses %v", seed, senses)
			assertPermutation(t, sol, x)
		}
	}
}

func assignmentProblem(cost [][]float64, workers, jobs Sense) (*Problem, [][]VarID) {
	n := len(cost)
	var p Problem
	x := make([][]VarID, n)
	var obj []Term
	for i := range n {
		for j := range n {
			x[i] = append(x[i], p.AddBinary(fmt.Sprintf("x_%d_%d", i, j)))
			obj = append(obj, Term{x[i][j], cost[i][j]})
		}
	}
	for i := range n {
		var row, col []Term
		for j := range n {
			row, col = append(row, Term{x[i][j], 1}), append(col, Term{x[j][i], 1})
		}
		p.AddRow(fmt.Sprintf("worker%d", i), row, workers, 1)
		p.AddRow(fmt.Sprintf("job%d", i), col, jobs, 1)
	}
	p.SetObjective(obj, 0)
	return &p, x
}

func assertPermutation(t *testing.T, sol *Solution, x [][]VarID) {
	t.Helper()
	for i := range x {
		ones := 0
		for j := range x[i] {
			ones += int(sol.Value(x[i][j]))
		}
		assert.Equal(t, 1, ones, "worker %d", i)
	}
}

// The intra-operator pass's model in miniature (one-hot strategies,
// continuous edge vars, a memory row) against brute force over all choices;
// the one-hot binaries must decode to a choice of exactly that cost.
func TestSolveAlpaModelMatchesBruteForce(t *testing.T) {
	for seed := range uint64(10) {
		a := randomAlpa(6+int(seed%3), 3, seed)
		p, s := a.problem()
		sol := solveOK(t, p)
		want := a.bruteForce()
		assert.InDelta(t, want, sol.Objective, 1e-6, "seed %d", seed)
		got, fits := a.cost(choiceOf(sol, s))
		assert.True(t, fits, "seed %d: decoded choice breaks the memory budget", seed)
		assert.InDelta(t, want, got, 1e-6, "seed %d", seed)
	}
}

func TestSolveInfeasible(t *testing.T) {
	var p Problem
	x, y := p.AddBinary("x"), p.AddBinary("y")
	p.AddRow("too_many", []Term{{x, 1}, {y, 1}}, GE, 3)
	sol, err := Solve(context.Background(), &p, Options{})
	assert.Nil(t, sol)
	assert.ErrorIs(t, err, ErrInfeasible)
}

// Integer infeasibility that the LP relaxation does not show: 2x + 2y = 3.
func TestSolveIntegerInfeasible(t *testing.T) {
	var p Problem
	x, y := p.AddInteger("x", 0, 10), p.AddInteger("y", 0, 10)
	p.AddRow("odd", []Term{{x, 2}, {y, 2}}, EQ, 3)
	_, err := Solve(context.Background(), &p, Options{})
	assert.ErrorIs(t, err, ErrInfeasible)
}

func TestSolveUnbounded(t *testing.T) {
	var p Problem
	x := p.AddContinuous("x", 0, math.Inf(1))
	y := p.AddContinuous("y", 0, 1)
	p.AddRow("", []Term{{x, 1}, {y, -1}}, GE, 0)
	p.SetObjective([]Term{{x, -1}}, 0)
	sol, err := Solve(context.Background(), &p, Options{})
	assert.Nil(t, sol)
	assert.ErrorIs(t, err, ErrUnbounded)
}

// A subset-sum knapsack of 60 items cannot be proven optimal in 20ms, so the
// limit must stop the search; lp_solve finds feasible points at once, which
// must come back with Status Feasible and pass Evaluate.
func TestSolveTimeLimit(t *testing.T) {
	p := hardSubsetSum(60, 1)
	var st Stats
	restore := Trace(func(_ *Problem, s Stats) { st = s })
	sol, err := Solve(context.Background(), p, Options{TimeLimit: 20 * time.Millisecond})
	restore()
	require.ErrorIs(t, err, ErrTimeout)
	// The limit is on the solve's CPU time (TestSolveTimeLimitIsCPUTime): the wall clock
	// of a loaded machine may run far past it.
	assert.Less(t, st.CPU, time.Second, "the limit must stop the search")
	require.NotNil(t, sol, "lp_solve found no feasible point in 20ms: %v", err)
	assert.Equal(t, Feasible, sol.Status)
	requireSolutionChecks(t, p, sol)
}

// With a 1ms limit there may or may not be a feasible point yet; either
// way the error is ErrTimeout and whatever comes back is feasible.
func TestSolveTinyTimeLimit(t *testing.T) {
	p := hardSubsetSum(60, 2)
	sol, err := Solve(context.Background(), p, Options{TimeLimit: time.Millisecond})
	require.ErrorIs(t, err, ErrTimeout)
	if sol != nil {
		requireSolutionChecks(t, p, sol)
	}
}

func TestSolveContextDoneBefore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var p Problem
	p.AddBinary("x")
	sol, err := Solve(ctx, &p, Options{})
	assert.Nil(t, sol)
	assert.ErrorIs(t, err, context.Canceled)
}

// Cancelling during a search that would run for ages stops it promptly.
func TestSolveContextCancelledDuring(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	sol, err := Solve(ctx, hardSubsetSum(60, 3), Options{TimeLimit: time.Minute})
	assert.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, errors.Is(err, ErrTimeout), "a context deadline is not the solver's time limit")
	if sol != nil {
		assert.Equal(t, Feasible, sol.Status)
	}
}

// Malformed problems give errors from Solve and Validate, never panics.
func TestSolveBadInput(t *testing.T) {
	cases := []struct {
		name  string
		build func(p *Problem)
		want  string
	}{
		{"unknown var in row", func(p *Problem) { p.AddRow("r", []Term{{7, 1}}, LE, 1) }, "names unknown var 7"},
		{"negative var in objective", func(p *Problem) { p.SetObjective([]Term{{-1, 1}}, 0) }, "unknown var -1"},
		{"NaN coefficient", func(p *Problem) { p.AddRow("r", []Term{{0, math.NaN()}}, LE, 1) }, "coefficient NaN"},
		{"infinite coefficient", func(p *Problem) { p.SetObjective([]Term{{0, math.Inf(1)}}, 0) }, "coefficient +Inf"},
		{"infinite rhs", func(p *Problem) { p.AddRow("r", []Term{{0, 1}}, LE, math.Inf(1)) }, "rhs +Inf"},
		{"NaN constant", func(p *Problem) { p.SetObjective(nil, math.NaN()) }, "constant is NaN"},
		{"lo > hi", func(p *Problem) { p.AddContinuous("y", 2, 1) }, "var y has lo 2 > hi 1"},
		{"NaN bound", func(p *Problem) { p.AddInteger("y", math.NaN(), 1) }, "NaN bound"},
		{"empty bounds", func(p *Problem) { p.AddContinuous("y", math.Inf(1), math.Inf(1)) }, "empty bounds"},
		{"bad sense", func(p *Problem) { p.AddRow("r", []Term{{0, 1}}, Sense(0), 1) }, "unknown sense 0"},
		{"binary bounds", func(p *Problem) { p.Vars[0].Hi = 2 }, "want [0, 1]"},
		{"bad kind", func(p *Problem) { p.Vars[0].Kind = 9 }, "unknown kind 9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p Problem
			p.AddBinary("x")
			c.build(&p)
			require.ErrorContains(t, p.Validate(), c.want)
			var sol *Solution
			var err error
			require.NotPanics(t, func() { sol, err = Solve(context.Background(), &p, Options{}) })
			assert.Nil(t, sol)
			assert.ErrorContains(t, err, c.want)
			ev := Evaluate(&p, []float64{0})
			assert.ErrorContains(t, ev.Err(), c.want)
		})
	}
}

// Solve shares no state between calls: concurrent solves of the same
// problem agree (run with -race to check the binding too).
func TestSolveConcurrent(t *testing.T) {
	p, _ := randomAlpa(30, 4, 7).problem()
	want := solveOK(t, p).Objective
	var wg sync.WaitGroup
	got := make([]float64, 4)
	for i := range got {
		wg.Go(func() {
			sol, err := Solve(context.Background(), p, Options{TimeLimit: 10 * time.Second})
			if assert.NoError(t, err) {
				got[i] = sol.Objective
			}
		})
	}
	wg.Wait()
	for _, g := range got {
		assert.Equal(t, want, g)
	}
}

// A few-thousand-variable model of the sharding pass's shape solves to
// optimality (speed is measured by BenchmarkSolve, not asserted here).
func TestSolveAlpaModelMedium(t *testing.T) {
	p, _ := randomAlpa(250, 4, 11).problem()
	require.Greater(t, p.NumVars(), 3000)
	solveOK(t, p)
}
