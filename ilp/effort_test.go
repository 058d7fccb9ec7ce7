package ilp

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An iteration limit stops the search at the same point whatever the clock says: the
// subset-sum knapsack, which no solve proves optimal in reasonable time, stopped at 3000
// simplex iterations gives the same feasible point with no time limit, with an hour's,
// and while other goroutines keep every core busy. (solve, not Solve, so that the memo
// does not answer the repeats.)
func TestSolveIterationLimitIgnoresTheClock(t *testing.T) {
	p := hardSubsetSum(60, 4)
	run := func(limit time.Duration) *Solution {
		sol, reusable, err := solve(context.Background(), p, Options{Iterations: 3000, TimeLimit: limit})
		require.ErrorIs(t, err, ErrTimeout)
		assert.Contains(t, err.Error(), "iteration limit 3000")
		assert.True(t, reusable, "a stop by effort is a function of the problem")
		require.NotNil(t, sol)
		assert.Equal(t, Feasible, sol.Status)
		requireSolutionChecks(t, p, sol)
		return sol
	}
	want := run(0)
	assert.Equal(t, want, run(time.Hour))

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() { // load: spin until the solve is done
			defer wg.Done()
			x := 0
			for !stop.Load() {
				x++
			}
			_ = x
		}()
	}
	loaded := run(time.Hour)
	stop.Store(true)
	wg.Wait()
	assert.Equal(t, want, loaded)
}

// The memo answers a repeated solve with a copy of the first answer, and never keeps an
// answer that the clock cut short.
func TestSolveMemo(t *testing.T) {
	var cached []bool
	var mu sync.Mutex
	defer Trace(func(_ *Problem, st Stats) {
		mu.Lock()
		cached = append(cached, st.Cached)
		mu.Unlock()
	})()
	p, _ := randomAlpa(12, 3, 5).problem()
	first := solveOK(t, p)
	first.Values[0] = 42 // the caller owns its Solution
	second := solveOK(t, p)
	assert.NotEqual(t, 42.0, second.Values[0])
	assert.Equal(t, []bool{false, true}, cached)

	cached = nil
	hard := hardSubsetSum(60, 5)
	for range 2 {
		_, err := Solve(context.Background(), hard, Options{TimeLimit: 10 * time.Millisecond})
		require.ErrorIs(t, err, ErrTimeout)
	}
	assert.Equal(t, []bool{false, false}, cached, "a time-limited answer is not reused")
}

// Concurrent solves of one problem agree, and only one of them runs lp_solve.
func TestSolveMemoConcurrent(t *testing.T) {
	var solved atomic.Int32
	defer Trace(func(_ *Problem, st Stats) {
		if !st.Cached {
			solved.Add(1)
		}
	})()
	p, _ := randomAlpa(40, 3, 6).problem()
	got := make([]*Solution, 4)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sol, err := Solve(context.Background(), p, Options{})
			require.NoError(t, err)
			got[i] = sol
		}()
	}
	wg.Wait()
	for _, g := range got[1:] {
		assert.Equal(t, got[0], g)
	}
	assert.Equal(t, int32(1), solved.Load())
}
