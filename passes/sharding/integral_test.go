package sharding

import (
	"context"
	"encoding/gob"
	"flag"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

// The integrality gap of the memory-bound ILPs, measured (docs/DECISIONS.md, "Round twelve,
// integral"). lagmulti found the memory rows' Lagrangian at the ILP's LP relaxation, and the
// best plans known 0.3–0.8 % above it; what is left to a bound is integrality. lpBranchBound
// measures how fast branching closes it: the least LP bound over the leaves of a tree that
// splits on the most fractional integer variable, both ways, to a depth. A bound, since the
// leaves cover every integer point of the problem.

var (
	lpBranchFile  = flag.String("lp-branch", "", "TestLPBranchProbe: a gob of BenchmarkCompileAlpa's -ilp-dump")
	lpBranchDepth = flag.Int("lp-branch-depth", 2, "TestLPBranchProbe: the depth of the branching tree")
)

// lpBranchBound is the least LP bound over the leaves of the tree of p that branches on the
// most fractional integer variable to depth (leaves with no integer variable fractional
// stop early; an infeasible leaf bounds nothing: +Inf), and the LP relaxations solved. fix
// holds the variables fixed so far (both bounds at the value). trace, when set, sees each
// node: its depth, LP bound and the variable it branches on (−1: a leaf).
func lpBranchBound(ctx context.Context, p *ilp.Problem, depth int, trace func(depth int, lp float64, v ilp.VarID)) (float64, int, error) {
	relaxed := *p
	relaxed.Vars = make([]ilp.Var, len(p.Vars))
	for i, v := range p.Vars {
		relaxed.Vars[i] = v
		relaxed.Vars[i].Kind = ilp.Continuous
	}
	solves := 0
	var node func(d int) (float64, error)
	node = func(d int) (float64, error) {
		sol, err := ilp.Solve(ctx, &relaxed, ilp.Options{})
		solves++
		if err != nil {
			if err == ilp.ErrInfeasible {
				return math.Inf(1), nil
			}
			return 0, err
		}
		v := mostFractional(p, sol.Values)
		if d == depth || v < 0 {
			if trace != nil {
				trace(d, sol.Objective, -1)
			}
			return sol.Objective, nil
		}
		if trace != nil {
			trace(d, sol.Objective, v)
		}
		lo, hi := relaxed.Vars[v].Lo, relaxed.Vars[v].Hi
		x := sol.Values[v]
		least := math.Inf(1)
		for _, side := range [2][2]float64{{lo, math.Floor(x)}, {math.Ceil(x), hi}} {
			relaxed.Vars[v].Lo, relaxed.Vars[v].Hi = side[0], side[1]
			b, err := node(d + 1)
			if err != nil {
				return 0, err
			}
			least = min(least, b)
		}
		relaxed.Vars[v].Lo, relaxed.Vars[v].Hi = lo, hi
		return least, nil
	}
	b, err := node(0)
	return b, solves, err
}

// mostFractional is p's integer variable whose value in x is farthest from an integer (the
// first on a tie; −1 when all are within 1e-6 of one).
func mostFractional(p *ilp.Problem, x []float64) ilp.VarID {
	best, at := 1e-6, ilp.VarID(-1)
	for i, v := range p.Vars {
		if v.Kind == ilp.Continuous {
			continue
		}
		if f := math.Abs(x[i] - math.Round(x[i])); f > best {
			best, at = f, ilp.VarID(i)
		}
	}
	return at
}

// TestLPBranchBoundIsLower checks lpBranchBound on a small multiple-choice knapsack with
// pairwise costs, the memory rows' shape: every depth's bound is at most the integer
// optimum lp_solve proves, no lower than the last depth's, and a tree deep enough to fix
// every fractional variable reaches the optimum.
func TestLPBranchBoundIsLower(t *testing.T) {
	p := choiceKnapsack()
	opt, err := ilp.Solve(context.Background(), p, ilp.Options{})
	require.NoError(t, err)
	last := math.Inf(-1)
	for depth := range 12 {
		b, _, err := lpBranchBound(context.Background(), p, depth, nil)
		require.NoError(t, err)
		require.LessOrEqual(t, b, opt.Objective+1e-9, "depth %d", depth)
		require.GreaterOrEqual(t, b, last-1e-9, "depth %d", depth)
		last = b
	}
	require.InDelta(t, opt.Objective, last, 1e-9)
	lp, _, err := lpBranchBound(context.Background(), p, 0, nil)
	require.NoError(t, err)
	require.Less(t, lp, opt.Objective-1e-6, "the instance has an integrality gap to close")
}

// choiceKnapsack is six groups of three strategies each (one chosen: a binary per strategy,
// their sum 1), a cost per strategy, a cost per pair of neighbouring groups' strategies that
// differ in kind (the resharding: linearized, d ≥ x_a + y_b − 1), and one memory row: the
// cheap strategies together do not fit.
func choiceKnapsack() *ilp.Problem {
	p := &ilp.Problem{}
	const groups, labels = 6, 3
	cost := [labels]float64{1, 1.6, 2.5}
	bytes := [labels]float64{5, 3, 1}
	x := make([][labels]ilp.VarID, groups)
	var obj, mem []ilp.Term
	for g := range groups {
		var one []ilp.Term
		for k := range labels {
			x[g][k] = p.AddBinary(fmt.Sprintf("x%d.%d", g, k))
			one = append(one, ilp.Term{Var: x[g][k], Coef: 1})
			obj = append(obj, ilp.Term{Var: x[g][k], Coef: cost[k] + 0.1*float64(g)})
			mem = append(mem, ilp.Term{Var: x[g][k], Coef: bytes[k] + float64(g%2)})
		}
		p.AddRow(fmt.Sprintf("one%d", g), one, ilp.EQ, 1)
	}
	for g := 1; g < groups; g++ {
		for a := range labels {
			for b := range labels {
				if a == b {
					continue
				}
				d := p.AddContinuous(fmt.Sprintf("d%d.%d.%d", g, a, b), 0, 1)
				p.AddRow(fmt.Sprintf("e%d.%d.%d", g, a, b), []ilp.Term{{Var: x[g-1][a], Coef: 1}, {Var: x[g][b], Coef: 1}, {Var: d, Coef: -1}}, ilp.LE, 1)
				obj = append(obj, ilp.Term{Var: d, Coef: 0.7})
			}
		}
	}
	p.AddRow("mem", mem, ilp.LE, 20)
	p.SetObjective(obj, 0)
	return p
}

// TestLPBranchProbe prints lpBranchBound's tree for a dumped ILP (-lp-branch FILE, with
// -lp-branch-depth): how far branching on the disputed variables raises the LP bound.
func TestLPBranchProbe(t *testing.T) {
	if *lpBranchFile == "" {
		t.Skip("no -lp-branch dump")
	}
	f, err := os.Open(*lpBranchFile)
	require.NoError(t, err)
	defer f.Close()
	var rec struct {
		P         *ilp.Problem
		Limit     time.Duration
		Incumbent []float64
	}
	require.NoError(t, gob.NewDecoder(f).Decode(&rec))
	start := time.Now()
	b, solves, err := lpBranchBound(context.Background(), rec.P, *lpBranchDepth, func(d int, lp float64, v ilp.VarID) {
		name := "leaf"
		if v >= 0 {
			name = "branch on " + rec.P.VarName(v)
		}
		t.Logf("%*sdepth %d: LP %.9g, %s", 2*d, "", d, lp, name)
	})
	require.NoError(t, err)
	t.Logf("%d variables: bound %.9g at depth %d, %d LPs, %v", len(rec.P.Vars), b, *lpBranchDepth, solves, time.Since(start))
}
