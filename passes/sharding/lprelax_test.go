package sharding

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
)

func TestLPRelax(t *testing.T) {
	if !*mpMeasure {
		t.Skip()
	}
	g := gptLayerStep(t)
	for _, sh := range [][2]int{{1, 4}, {2, 2}} {
		c, lm := benchMesh(t, "dgx-a100", sh[0], sh[1])
		p, err := newPlanner(g, lm, Options{Cluster: c})
		require.NoError(t, err)
		q := *p.prob
		q.Vars = append([]ilp.Var(nil), q.Vars...)
		for i := range q.Vars {
			if q.Vars[i].Kind == ilp.Binary {
				q.Vars[i].Kind = ilp.Continuous
			}
		}
		sol, err := ilp.Solve(context.Background(), &q, ilp.Options{})
		require.NoError(t, err)
		frac := 0
		for gi := range p.groups {
			for _, v := range p.s[gi] {
				if x := sol.Values[v]; x > 1e-6 && x < 1-1e-6 {
					frac++
				}
			}
		}
		fmt.Println(sh, "LP", sol.Objective, "fractional node vars", frac)
	}
}
