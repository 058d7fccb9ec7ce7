package sharding

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freeBoundSlack is 0; the mutation check of TestFreeBoundIsLower sets it to 1e-6 by hand
// (the bound raised by that fraction of itself): the test then fails.
const freeBoundSlack = 0.0

// TestFreeBoundIsLower: on the tiny zoo models' steps on 2×2 and 1×4, free and (mlp-tiny on
// 1×4: lp_solve alone takes 10 s to minutes on the others) under budgets that bind (90 and 75 % of the
// free plan's peak), FreeBound is at most the
// objective lp_solve finds (LPSolveOnly: no certificate) and at most what Solve returns;
// where it offers an Answer, that is Solve's own result (the same strategies, cost,
// objective, peak and copies).
func TestFreeBoundIsLower(t *testing.T) {
	answered, bound := 0, 0
	for _, name := range []string{"mlp-tiny", "gpt-tiny"} {
		g := tinyStep(t, name)
		for _, shape := range [][2]int{{2, 2}, {1, 4}} {
			lm := uniform(t, shape[0], shape[1])
			base := Options{DeviceFLOPS: 1e9, Iterations: 20000} // lp_solve at a limit answers a plan no better than the optimum
			free, err := Solve(context.Background(), g, lm, base)
			require.NoError(t, err)
			for _, frac := range []int64{0, 90, 75} {
				if frac > 0 && (name != "mlp-tiny" || shape[0] > 1) {
					continue // lp_solve alone takes 10 s to minutes under these budgets
				}
				opts := base
				opts.MemoryBudget = free.PeakMemory * frac / 100
				at := name + " " + lm.String()
				t0 := time.Now()
				d, err := FreeBound(context.Background(), g, lm, opts)
				require.NoError(t, err, at)
				lb := d.Bound * (1 + freeBoundSlack)
				t.Logf("%s at %d%%: bound %.9g (%v)", at, frac, lb, time.Since(t0))
				lpOpts := opts
				lpOpts.LPSolveOnly = true
				lp, lpErr := Solve(context.Background(), g, lm, lpOpts)
				got, err := Solve(context.Background(), g, lm, opts)
				if err != nil || lpErr != nil {
					assert.Nil(t, d.Answer, "%s at %d%%: an answer where Solve has none", at, frac)
					continue // the budget leaves no plan
				}
				bound++
				t.Logf("%s at %d%%: lp_solve %.9g %s, Solve %.9g %s (%v)", at, frac, lp.ILP.Objective, lp.ILP.Status, got.ILP.Objective, got.ILP.Solver, time.Since(t0))
				assert.LessOrEqual(t, lb, lp.ILP.Objective, "%s at %d%%: bound against lp_solve", at, frac)
				assert.LessOrEqual(t, lb, got.ILP.Objective, "%s at %d%%: bound against Solve", at, frac)
				assert.LessOrEqual(t, d.Bound, d.Plan*(1+1e-9), at)
				if d.Answer == nil {
					continue
				}
				answered++
				assert.True(t, d.Closed, at)
				assert.Equal(t, got.ILP.Objective, d.Answer.ILP.Objective, at)
				assert.Equal(t, got.Choice, d.Answer.Choice, at)
				assert.Equal(t, got.Cost, d.Answer.Cost, at)
				assert.Equal(t, got.PeakMemory, d.Answer.PeakMemory, at)
				assert.Equal(t, got.Gathered, d.Answer.Gathered, at)
				assert.Equal(t, got.ILP.Solver, d.Answer.ILP.Solver, at)
			}
		}
	}
	t.Logf("%d bounds checked, %d answered by the certificate", bound, answered)
	assert.Positive(t, answered)
	assert.Greater(t, bound, answered, "some budgets bind")
}
