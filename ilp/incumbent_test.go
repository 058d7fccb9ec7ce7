package ilp

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// alpaPoint is the ILP point of choice in a's problem: the one-hot s, and each edge's
// k×k variables the product of its ends' (problem adds the s first, then each edge's).
func (a *alpaInstance) alpaPoint(p *Problem, choice []int) []float64 {
	x := make([]float64, len(p.Vars))
	n := len(a.nodeCost)
	for v, st := range choice {
		x[v*a.k+st] = 1
	}
	for i, ed := range a.edges {
		x[n*a.k+i*a.k*a.k+choice[ed[0]]*a.k+choice[ed[1]]] = 1
	}
	return x
}

// feasiblePoints lists every choice's point of a's problem p that Evaluate finds
// feasible, with its objective, cheapest first.
func (a *alpaInstance) feasiblePoints(p *Problem) (points [][]float64, objs []float64) {
	n := len(a.nodeCost)
	choice := make([]int, n)
	type pt struct {
		x   []float64
		obj float64
	}
	var all []pt
	for {
		x := a.alpaPoint(p, choice)
		if ev := Evaluate(p, x); ev.Feasible() {
			all = append(all, pt{x, ev.Objective})
		}
		i := n - 1
		for ; i >= 0; i-- {
			if choice[i]++; choice[i] < a.k {
				break
			}
			choice[i] = 0
		}
		if i < 0 {
			break
		}
	}
	slices.SortStableFunc(all, func(u, v pt) int {
		switch {
		case u.obj < v.obj:
			return -1
		case u.obj > v.obj:
			return 1
		}
		return 0
	})
	for _, q := range all {
		points, objs = append(points, q.x), append(objs, q.obj)
	}
	return points, objs
}

// TestIncumbentNeverWrong: with an incumbent (Options.Incumbent) Solve still answers the
// optimum, as brute force over every plan finds it, whether the incumbent is the
// optimum, a middling plan or the worst that fits; under lp_solve's own scaling and the
// exact one (scaleRows, where the cutoff must be scaled as the objective row is), with the
// objective's sign and constant varied (the cutoff excludes ObjConstant), and every
// search runs with the cutoff (lp_solve fails numerically with one below the optimum, and
// Solve then drops it). Passing the cutoff without scaling it, with the constant left in,
// or returning the incumbent when lp_solve answers makes it fail.
func TestIncumbentNeverWrong(t *testing.T) {
	old := defaultTuning
	defer func() { defaultTuning = old }()
	ctx := context.Background()
	var answered, returned int
	var last Stats
	defer Trace(func(_ *Problem, st Stats) { last = st })()
	for _, scaled := range []bool{false, true} {
		defaultTuning = old
		defaultTuning.scaleRows = scaled
		for seed := range uint64(12) {
			a := randomAlpa(6, 3, 100+seed)
			p, _ := a.problem()
			// Vary the objective: negated (every point's objective below zero), scaled far
			// from 1 (the exact scaling moves it by a power of two), shifted by a constant.
			sign, scale := 1.0, math.Ldexp(1, int(seed%5)*7-14)
			if seed%2 == 1 {
				sign = -1
			}
			for i := range p.Objective {
				p.Objective[i].Coef *= sign * scale
			}
			p.ObjConstant = -float64(seed%3) * 1000 * scale
			points, objs := a.feasiblePoints(p)
			if len(points) == 0 {
				continue
			}
			best := objs[0]
			tol := 1e-9*math.Abs(best) + 1e-9
			for _, at := range []int{0, len(points) / 2, len(points) - 1} {
				sol, err := Solve(ctx, p, Options{Incumbent: points[at]})
				require.NoError(t, err, "seed %d scaled %v incumbent %d", seed, scaled, at)
				require.Equal(t, Optimal, sol.Status)
				require.NotNil(t, last.Incumbent, "seed %d: lp_solve searched with the cutoff", seed)
				requireSolutionChecks(t, p, sol)
				require.InDelta(t, best, sol.Objective, tol, "seed %d scaled %v incumbent %d of %d (%g)", seed, scaled, at, len(points), objs[at])
				if slices.Equal(sol.Values, points[at]) {
					returned++
				} else {
					answered++
				}
			}
		}
	}
	require.Positive(t, returned, "some answers are the incumbent itself")
	require.Positive(t, answered, "some are lp_solve's better points")
}

// TestIncumbentAtLimit: a search stopped by its iteration limit returns the better of the
// incumbent and lp_solve's best point, never a worse one, and the same answer each time.
func TestIncumbentAtLimit(t *testing.T) {
	ctx := context.Background()
	p := hardSubsetSum(60, 7)
	// The incumbent: the first items that fit, greedily.
	x := make([]float64, len(p.Vars))
	room := p.Rows[0].RHS
	for i, term := range p.Rows[0].Terms {
		if term.Coef <= room {
			x[i], room = 1, room-term.Coef
		}
	}
	inc := Evaluate(p, x).Objective
	plain, plainErr := Solve(ctx, p, Options{Iterations: 3000})
	require.ErrorIs(t, plainErr, ErrTimeout)
	for range 2 {
		sol, err := Solve(ctx, p, Options{Iterations: 3000, Incumbent: x})
		require.ErrorIs(t, err, ErrTimeout)
		require.NotNil(t, sol)
		require.Equal(t, Feasible, sol.Status)
		requireSolutionChecks(t, p, sol)
		require.LessOrEqual(t, sol.Objective, inc)
		t.Logf("incumbent %g, lp_solve alone %g, with the incumbent %g", inc, plain.Objective, sol.Objective)
	}
	// An incumbent that fits nothing better: lp_solve's limited search finds no better
	// point than the optimum of the relaxation's floor, so the answer is no worse than it.
	best, err := Solve(ctx, p, Options{Iterations: 3000, Incumbent: plain.Values})
	require.ErrorIs(t, err, ErrTimeout)
	require.LessOrEqual(t, best.Objective, plain.Objective)
}

// TestIncumbentRejected: an incumbent of the wrong length or one that violates a row is
// an error naming it, not a wrong answer.
func TestIncumbentRejected(t *testing.T) {
	a := randomAlpa(4, 3, 1)
	p, _ := a.problem()
	_, err := Solve(context.Background(), p, Options{Incumbent: []float64{1}})
	require.ErrorContains(t, err, "incumbent has 1 values")
	x := make([]float64, len(p.Vars)) // no strategy chosen: the one-hot rows fail
	_, err = Solve(context.Background(), p, Options{Incumbent: x})
	require.ErrorContains(t, err, "incumbent is not feasible")
	require.False(t, errors.Is(err, ErrInfeasible))
}
