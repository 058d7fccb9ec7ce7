package sharding

import (
	"context"
	"errors"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
)

// A MemoryError under the least footprint carries the min-peak ILP's plan (MemoryError.Plan),
// and it is a real plan: its peak, recomputed from its strategies by PeakWith, is the
// named minimum; solving the same graph with every value forced to the plan's strategy
// (one plan left, lp_solve pricing it) gives the same cost, layouts and peak; and its ILP
// objective is the plan ILP's (ilp.Evaluate at the choice's assignment, which satisfies
// every row of that ILP), weighted for micro-batches where the options say so. So
// compose.go's lean point built from it has its true time and memory.
func TestMemoryErrorCarriesItsPlan(t *testing.T) {
	g := mlpStep(t, 1024, 256, 2)
	lm := uniform(t, 1, 4)
	ctx := context.Background()
	update, acc := randomMarks(rand.New(rand.NewSource(7)), g)
	for _, opts := range []Options{{AlpaCompute: true}, {DeviceFLOPS: 1e6},
		{DeviceFLOPS: 1e6, Microbatches: 4, Update: update, Accumulated: acc}} {
		tight := opts
		tight.MemoryBudget = 1 << 20
		_, err := Solve(ctx, g, lm, tight)
		var me *MemoryError
		require.True(t, errors.As(err, &me), "got %v", err)
		require.True(t, me.Exact)
		plan := me.Plan
		require.NotNil(t, plan, "an exact minimum carries its plan")
		assert.Equal(t, me.Minimum, plan.PeakMemory)
		assert.Equal(t, me.Minimum, plan.Budget)
		peak, err := plan.PeakWith(g, nil)
		require.NoError(t, err)
		assert.Equal(t, me.Minimum, peak, "the plan's own peak is the minimum")
		assert.Contains(t, plan.ILP.Status, "min-peak")

		forced := opts
		forced.Force = map[ir.ValueID]int{}
		for v, k := range plan.Choice {
			forced.Force[ir.ValueID(v)] = k
		}
		r, err := Solve(ctx, g, lm, forced)
		require.NoError(t, err)
		assert.Equal(t, plan.Choice, r.Choice)
		assert.InDelta(t, r.Cost.Total, plan.Cost.Total, 1e-12*r.Cost.Total, "the plan's cost is the ILP's price of its choice")
		assert.Equal(t, r.Cost, plan.Cost)
		assert.Equal(t, r.PeakMemory, plan.PeakMemory)
		assert.Equal(t, r.Gathered, plan.Gathered)
		assert.Equal(t, len(r.Collectives), len(plan.Collectives))

		p, err := newPlanner(g, lm, opts)
		require.NoError(t, err)
		choice := make([]int, len(p.groups))
		for gi := range p.groups {
			choice[gi] = -1
			for k := range p.s[p.rep[gi]] {
				same := true
				for _, v := range p.groups[gi].members {
					same = same && int(p.pick(v, k)) == plan.Choice[v]
				}
				if same {
					choice[gi] = k
					break
				}
			}
			require.GreaterOrEqual(t, choice[gi], 0, "the plan's strategies of group %d are one of its strategies", gi)
		}
		ev := ilp.Evaluate(p.prob, p.assignment(choice))
		require.NoError(t, ev.Err())
		assert.InDelta(t, ev.Objective, plan.ILP.Objective, 1e-12*ev.Objective, "the plan ILP's objective of its choice")

		fits, err := Solve(ctx, g, lm, func() Options { o := opts; o.MemoryBudget = me.Minimum; return o }())
		require.NoError(t, err, "the minimum is a feasible budget")
		assert.LessOrEqual(t, fits.Cost.Total, plan.Cost.Total*(1+1e-12), "the fastest plan of that footprint is no slower")
	}
}
