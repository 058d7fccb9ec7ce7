package ilp

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// solveScaled solves p scaled exactly (scale.go), as the fallback does.
func solveScaled(t *testing.T, p *Problem) *Solution {
	t.Helper()
	m, err := build(p, tuning{presolve: -1, scaling: -1, bbRule: -1, floor: -1, improve: -1, simplex: -1, pivoting: -1, crash: -1, firstRule: -1, scaleRows: true})
	require.NoError(t, err)
	defer m.free()
	code := solveWatched(context.Background(), m, limits{})
	sol, err := result(context.Background(), p, m, code, Options{}, nil)
	require.NoError(t, err)
	return sol
}

// Scaling is exact: the scaled model of the sharding pass in miniature, its memory row in
// bytes and its costs in seconds, has brute force's optimum, and its values decode to a
// choice of that cost within the budget.
func TestScaledSolveMatchesBruteForce(t *testing.T) {
	for seed := range uint64(10) {
		a := randomAlpa(6+int(seed%3), 3, seed+100)
		for v := range a.mem { // bytes, not units: 2 to 10¹¹ in one row
			for k := range a.mem[v] {
				a.mem[v][k] = math.Ldexp(a.mem[v][k], 30) + 2
			}
		}
		a.budget = math.Ldexp(a.budget, 30)
		for e := range a.edgeCost { // seconds
			for r := range a.edgeCost[e] {
				for c := range a.edgeCost[e][r] {
					a.edgeCost[e][r][c] *= 1e-6
				}
			}
		}
		p, s := a.problem()
		sol := solveScaled(t, p)
		want := a.bruteForce()
		assert.InDelta(t, want, sol.Objective, 1e-9*math.Max(1, math.Abs(want)), "seed %d", seed)
		got, fits := a.cost(choiceOf(sol, s))
		assert.True(t, fits, "seed %d: decoded choice breaks the memory budget", seed)
		assert.InDelta(t, want, got, 1e-9*math.Max(1, math.Abs(want)), "seed %d", seed)
	}
}

// The min-peak ILP of the sharding pass for a GPT-1.3B stage on one device (testdata/
// minpeak.json, recorded by BenchmarkCompileAlpa -ilp-dump; every op has one strategy):
// peak ≥ the bytes live at each point, from 2 to 5.5·10¹¹ in one row. lp_solve 5.5.2.5
// alone gives up on it (ACCURACYERROR); Solve's scaled retry returns the exact peak, a
// continuous column scaled back.
func TestSolveWideRangePeak(t *testing.T) {
	raw, err := os.ReadFile("testdata/minpeak.json")
	require.NoError(t, err)
	var p Problem
	require.NoError(t, json.Unmarshal(raw, &p))
	m, err := build(&p, defaultTuning)
	require.NoError(t, err)
	code := solveWatched(context.Background(), m, limits{})
	m.free()
	t.Logf("lp_solve unscaled: %s", lpCodeNames[code])

	want, peak := 0.0, VarID(-1)
	for _, t := range p.Objective {
		peak = t.Var
	}
	for _, r := range p.Rows {
		if len(r.Terms) > 1 { // peak - Σ bytes·s >= 0, every s forced to 1 by its one-hot row
			sum := 0.0
			for _, t := range r.Terms {
				if t.Var != peak {
					sum -= t.Coef
				}
			}
			want = math.Max(want, sum)
		}
	}
	sol, err := Solve(context.Background(), &p, Options{})
	require.NoError(t, err)
	assert.InDelta(t, want, sol.Objective, 1e-9*want)
	assert.InDelta(t, want, sol.Value(peak), 1e-9*want)
}
