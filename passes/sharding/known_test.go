package sharding

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

// TestKnownChoiceSpellsThePlan: a plan named by its strategies (PlanOf) is held by the
// ILP it came from as the same choice of every value; a plan naming a strategy the value
// has not, or of the wrong length, is not held.
func TestKnownChoiceSpellsThePlan(t *testing.T) {
	c, lm := benchMesh(t, "dgx-a100", 2, 2)
	for _, model := range []string{"mlp-tiny", "gpt-tiny"} {
		g := tinyStep(t, model)
		opts := Options{Cluster: c, SolveLayersOnce: true}
		res, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err)
		p, err := newPlanner(g, lm, opts)
		require.NoError(t, err)
		choice := p.knownChoice(PlanOf(res))
		require.NotNil(t, choice, model)
		require.Equal(t, res.Choice, p.result(choice, ILPStats{}).Choice, model)
		bad := PlanOf(res)
		bad[len(bad)-1] = "no such strategy"
		require.Nil(t, p.knownChoice(bad), model)
		require.Nil(t, p.knownChoice(PlanOf(res)[1:]), model)
	}
}

// TestKnownPlanIsTheFloor: under budgets that bind, a solve stopped at once by its effort
// limit (one simplex iteration: lp_solve finds no point) answers with the known plan that
// fits, at its objective; a solve at a real limit answers no worse than it. A known plan
// that does not fit is not the answer: the stopped solve then has none. Every answer fits.
func TestKnownPlanIsTheFloor(t *testing.T) {
	c, lm := benchMesh(t, "dgx-a100", 2, 2)
	g := tinyStep(t, "mlp-tiny")
	free, err := Solve(context.Background(), g, lm, Options{Cluster: c})
	require.NoError(t, err)
	used := 0
	defer ilp.Trace(func(_ *ilp.Problem, st ilp.Stats) {
		if st.Incumbent != nil {
			used++
		}
	})()
	for _, frac := range []int64{90, 80, 70} {
		name := fmt.Sprintf("mlp-tiny at %d%%", frac)
		budget := free.PeakMemory * frac / 100
		opts := Options{Cluster: c, MemoryBudget: budget, LPSolveOnly: true}
		best, err := Solve(context.Background(), g, lm, opts)
		var me *MemoryError
		if errors.As(err, &me) {
			continue
		}
		require.NoError(t, err, name)
		opts.Known = []KnownPlan{PlanOf(free), PlanOf(best)} // the free plan does not fit
		opts.Iterations = 1
		got, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err, name)
		require.Equal(t, best.Choice, got.Choice, name)
		require.InDelta(t, best.ILP.Objective, got.ILP.Objective, 1e-12, name)
		require.LessOrEqual(t, got.PeakMemory, budget, name)
		opts.Iterations = 200
		limited, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err, name)
		require.LessOrEqual(t, limited.ILP.Objective, best.ILP.Objective+1e-12, name)
		require.LessOrEqual(t, limited.PeakMemory, budget, name)
		opts.Known, opts.Iterations = []KnownPlan{PlanOf(free)}, 1
		_, err = Solve(context.Background(), g, lm, opts)
		require.ErrorIs(t, err, ilp.ErrTimeout, name)
	}
	require.Positive(t, used, "some solves ran with the known plan as lp_solve's incumbent")
}
