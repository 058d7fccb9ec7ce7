package sharding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/autopar/autopar/ilp"
	"github.com/stretchr/testify/require"
)

// TestIncumbentAgainstLPSolve: with Options.Incumbent, under budgets that bind (fractions
// of the free plan's peak) on the tiny zoo models, Solve's answer fits and equals lp_solve's
// own optimum (LPSolveOnly) to lp_solve's gaps when either says optimal, else is no worse
// than lp_solve's point at the limit; and some of those solves ran with the Lagrangian
// search's plan as lp_solve's incumbent. Each is solved twice, the same answer both times.
// With -certify-all also gpt-tiny and moe-tiny (minutes).
func TestIncumbentAgainstLPSolve(t *testing.T) {
	c, lm := benchMesh(t, "dgx-a100", 2, 2)
	withInc := 0
	defer ilp.Trace(func(_ *ilp.Problem, st ilp.Stats) {
		if st.Incumbent != nil {
			withInc++
		}
	})()
	models := []string{"mlp-tiny"}
	if *certifyAll {
		models = append(models, "gpt-tiny", "moe-tiny") // moe-tiny at 90 %: 34,904 variables, ~25 s a solve
	}
	for _, model := range models {
		g := tinyStep(t, model)
		free, err := Solve(context.Background(), g, lm, Options{Cluster: c})
		require.NoError(t, err)
		for _, frac := range []int64{90, 80, 70, 60} {
			name := fmt.Sprintf("%s at %d%%", model, frac)
			opts := Options{Cluster: c, MemoryBudget: free.PeakMemory * frac / 100, Iterations: 5000, Incumbent: true}
			got, err := Solve(context.Background(), g, lm, opts)
			var me *MemoryError
			if errors.As(err, &me) {
				continue
			}
			again, err2 := Solve(context.Background(), g, lm, opts)
			require.Equal(t, err, err2, name)
			opts.LPSolveOnly, opts.Incumbent = true, false
			lp, lpErr := Solve(context.Background(), g, lm, opts)
			if lpErr != nil {
				require.ErrorIs(t, lpErr, ilp.ErrTimeout, name)
				if err == nil {
					require.LessOrEqual(t, got.PeakMemory, opts.MemoryBudget, name)
				}
				continue
			}
			require.NoError(t, err, name)
			require.Equal(t, got.Choice, again.Choice, name)
			require.LessOrEqual(t, got.PeakMemory, opts.MemoryBudget, name)
			tol := max(mpGapAbs, mpGapRel*math.Abs(lp.ILP.Objective)) + 1e-12*math.Abs(lp.ILP.Objective)
			if got.ILP.Status == "optimal" || lp.ILP.Status == "optimal" {
				require.InDelta(t, lp.ILP.Objective, got.ILP.Objective, tol, name)
			} else {
				require.LessOrEqual(t, got.ILP.Objective, lp.ILP.Objective+tol, name)
			}
			t.Logf("%s: %s %s %.12g (lp_solve %s %.12g)", name, got.ILP.Solver, got.ILP.Status, got.ILP.Objective, lp.ILP.Status, lp.ILP.Objective)
		}
	}
	require.Positive(t, withInc, "some solves had the Lagrangian's incumbent")
}
