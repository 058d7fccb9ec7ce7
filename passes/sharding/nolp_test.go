package sharding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

// TestNoLPAboveAnswersFit: with Options.NoLPAbove below the ILP's size, a memory-bound
// solve the certificate does not close is answered without lp_solve: by the Lagrangian
// search's plan, which fits the budget, says "feasible" and is no better than lp_solve's
// optimum where that is proven (a real plan of the same ILP), or by ErrTimeout; without the option the answer is
// lp_solve's as before. mlp-tiny on 2×2 under budgets that bind. Caught: the size test
// turned round (nothing skipped).
func TestNoLPAboveAnswersFit(t *testing.T) {
	c, lm := benchMesh(t, "dgx-a100", 2, 2)
	g := tinyStep(t, "mlp-tiny")
	free, err := Solve(context.Background(), g, lm, Options{Cluster: c})
	require.NoError(t, err)
	skipped, planned := 0, 0
	for _, frac := range []int64{95, 80, 60} {
		name := fmt.Sprintf("mlp-tiny at %d%%", frac)
		opts := Options{Cluster: c, MemoryBudget: free.PeakMemory * frac / 100, Iterations: 5000}
		want, wantErr := Solve(context.Background(), g, lm, opts)
		var me *MemoryError
		if errors.As(wantErr, &me) {
			continue
		}
		opts.NoLPAbove = 1
		got, err := Solve(context.Background(), g, lm, opts)
		if err != nil {
			require.ErrorIs(t, err, ilp.ErrTimeout, name)
			skipped++
			continue
		}
		if got.ILP.Solver == "lagrange" {
			require.Equal(t, "feasible", got.ILP.Status, name)
			skipped++
			planned++
		}
		require.LessOrEqual(t, got.PeakMemory, opts.MemoryBudget, name)
		if wantErr == nil && want.ILP.Status == "optimal" {
			require.GreaterOrEqual(t, got.ILP.Objective, want.ILP.Objective-1e-9*math.Abs(want.ILP.Objective), "%s: %s %s against %s %s", name, got.ILP.Solver, got.ILP.Status, want.ILP.Solver, want.ILP.Status)
		}
		t.Logf("%s: %s %s %.9g (lp_solve: %v)", name, got.ILP.Solver, got.ILP.Status, got.ILP.Objective, wantErr)
	}
	require.Positive(t, skipped, "some solves skipped lp_solve")
	require.Positive(t, planned, "some were answered by the Lagrangian's plan")
}
