package ilp

import (
	"compress/gzip"
	"context"
	"encoding/gob"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The stage ILP that branch and bound blew up on (testdata/stage-gpt13b-memrows.gob.gz,
// recorded by BenchmarkCompileAlpa -ilp-dump on gpt-1.3b/4: a 24-layer stage on 2×2, 6,550
// variables, four memory rows making the root fractional). Under NODE_FRACTIONSELECT alone
// lp_solve had a point 3.4 % above the optimum after 40,000 simplex iterations and proved
// nothing in 30 s; the first rule settles it in a few thousand. The optimum is checked
// against the LP relaxation, a lower bound found independently: it lies within 0.003 %.
func TestSolveRecordedStageBlowUp(t *testing.T) {
	p := readGob(t, "testdata/stage-gpt13b-memrows.gob.gz")
	var st Stats
	restore := Trace(func(_ *Problem, s Stats) { st = s })
	sol, _, err := solve(context.Background(), p, Options{Iterations: 10000})
	restore()
	require.NoError(t, err, "proven optimal within 10,000 iterations")
	assert.Equal(t, Optimal, sol.Status)
	assert.Equal(t, 1, st.Rules, "the first rule proved it")
	requireSolutionChecks(t, p, sol)

	relaxed := *p
	relaxed.Vars = append([]Var(nil), p.Vars...)
	for i := range relaxed.Vars {
		relaxed.Vars[i].Kind = Continuous
	}
	lower, _, err := solve(context.Background(), &relaxed, Options{})
	require.NoError(t, err)
	assert.LessOrEqual(t, lower.Objective, sol.Objective*(1+1e-12))
	assert.Less(t, (sol.Objective-lower.Objective)/sol.Objective, 3e-5)
	t.Logf("optimum %.9g, relaxation %.9g, %d iterations, %d nodes", sol.Objective, lower.Objective, st.Iterations, st.Nodes)
}

// Every brute-force comparison of the package holds under each way solve can branch: the
// default (the first rule within its allowance, then the second), the first rule handing
// over right after its first branch (allowance 1, so the second rule's search, seeded with
// the first's point, decides), and each rule alone. The handover must happen, or the
// second case tests nothing.
func TestBranchingRulesMatchBruteForce(t *testing.T) {
	oldT, oldMin := defaultTuning, bbAllowanceMin
	defer func() { defaultTuning, bbAllowanceMin = oldT, oldMin }()
	firstAlone := oldT
	firstAlone.bbRule, firstAlone.firstRule = oldT.firstRule, -1
	secondAlone := oldT
	secondAlone.firstRule = -1
	for _, c := range []struct {
		name     string
		t        tuning
		min      int64
		handover bool
	}{
		{"default", oldT, oldMin, false},
		{"handover", oldT, 1, true},
		{"first alone", firstAlone, oldMin, false},
		{"second alone", secondAlone, oldMin, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			defaultTuning, bbAllowanceMin = c.t, c.min
			handovers := 0
			defer Trace(func(_ *Problem, s Stats) {
				if s.Rules == 2 {
					handovers++
				}
			})()
			for seed := range uint64(16) {
				a := randomAlpa(6+int(seed%4), 3, 100+seed)
				a.budget *= 0.9 // tighter: more branching
				p, s := a.problem()
				sol, _, err := solve(context.Background(), p, Options{})
				want := a.bruteForce()
				if want > 1e300 {
					require.ErrorIs(t, err, ErrInfeasible, "seed %d", seed)
					continue
				}
				require.NoError(t, err, "seed %d", seed)
				assert.InDelta(t, want, sol.Objective, 1e-6, "seed %d", seed)
				got, fits := a.cost(choiceOf(sol, s))
				assert.True(t, fits, "seed %d", seed)
				assert.InDelta(t, want, got, 1e-6, "seed %d", seed)
			}
			for seed := range uint64(12) {
				r := newRand(200 + seed)
				p, values, weights, capacity := randomKnapsack(r, 14+r.IntN(8), 40+r.IntN(60))
				sol, _, err := solve(context.Background(), p, Options{})
				require.NoError(t, err, "knapsack seed %d", seed)
				assert.Equal(t, -float64(knapsackDP(values, weights, capacity)), sol.Objective, "knapsack seed %d", seed)
			}
			if c.handover {
				assert.Positive(t, handovers, "no solve handed over to the second rule")
			} else {
				t.Logf("%d handovers", handovers)
			}
		})
	}
}

// A first rule that cannot settle a problem within its allowance hands it to the second,
// which proves the optimum: a random miniature on which the first rule alone takes 7,200
// iterations and the second alone 1,367.
func TestBranchingHandsOver(t *testing.T) {
	p, _ := randomAlpa(60, 4, 13).problem()
	var st Stats
	defer Trace(func(_ *Problem, s Stats) { st = s })()
	sol, _, err := solve(context.Background(), p, Options{})
	require.NoError(t, err)
	assert.Equal(t, Optimal, sol.Status)
	assert.Equal(t, 2, st.Rules)
	requireSolutionChecks(t, p, sol)
}

// The time limit counts the solve's own CPU time, not the wall clock: with twice as many
// goroutines spinning as there are cores, a solve stopped by a 100 ms limit has still had
// 100 ms of CPU (a wall-clock limit would have given it about half).
func TestSolveTimeLimitIsCPUTime(t *testing.T) {
	p := hardSubsetSum(60, 5)
	stop := spin(2 * numCPU())
	var st Stats
	restore := Trace(func(_ *Problem, s Stats) { st = s })
	_, _, err := solve(context.Background(), p, Options{TimeLimit: 100 * time.Millisecond})
	restore()
	stop()
	require.ErrorIs(t, err, ErrTimeout)
	assert.GreaterOrEqual(t, st.CPU, 95*time.Millisecond, "stopped after %v of CPU in %v", st.CPU, st.Wall)
	t.Logf("CPU %v, wall %v", st.CPU, st.Wall)
}

func readGob(t *testing.T, path string) *Problem {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err)
	var rec struct {
		P     *Problem
		Limit time.Duration
	}
	require.NoError(t, gob.NewDecoder(z).Decode(&rec))
	return rec.P
}

func numCPU() int { return runtime.GOMAXPROCS(0) }

// spin keeps n goroutines busy until the returned function is called.
func spin(n int) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for !done.Load() {
				x++
			}
			_ = x
		}()
	}
	return func() {
		done.Store(true)
		wg.Wait()
	}
}
