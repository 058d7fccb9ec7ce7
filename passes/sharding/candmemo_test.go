package sharding

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

// TestCandidateMemo: solves through a CandidateMemo, under budgets and micro-batch
// weights that differ between calls, give byte-identical plans to solves without it; the
// second solve of the same (graph, mesh) reuses the first's strategies, another mesh or a
// forced solve does not, the groups are built once per weighing, and the memo keeps at
// most candMemoSize entries.
func TestCandidateMemo(t *testing.T) {
	g := tinyStep(t, "mlp-tiny")
	c, lm := benchMesh(t, "p3.16xlarge", 2, 2)
	_, lm2 := benchMesh(t, "p3.16xlarge", 1, 4)
	memo := &CandidateMemo{}
	plan := func(r *Result) string {
		r.ILP.SolveTime = 0 // the one field that depends on the clock
		b, err := json.Marshal(struct {
			R      *Result
			Choice []int
		}{r, r.Choice})
		require.NoError(t, err)
		return string(b)
	}
	update := make([]bool, len(g.Values))
	for i := len(update) * 3 / 4; i < len(update); i++ {
		update[i] = true
	}
	for _, o := range []Options{
		{Cluster: c},
		{Cluster: c, FullConvs: true},
		{Cluster: c, Microbatches: 4, Update: update},
	} {
		want, err := Solve(context.Background(), g, lm, o)
		require.NoError(t, err)
		o.Candidates = memo
		for range 2 { // the second solve also takes the groups from the memo
			got, err := Solve(context.Background(), g, lm, o)
			require.NoError(t, err)
			require.Equal(t, plan(want), plan(got))
		}
	}
	require.Len(t, memo.ents, 2, "one entry per (graph, mesh, cost model, FullConvs)")
	require.Len(t, memo.ents[0].groups, 2, "one group build per weighing of the objective")
	opts := Options{Cluster: c, Candidates: memo}
	a, _, _, err := memo.candidates(context.Background(), g, lm, opts)
	require.NoError(t, err)
	b, _, _, err := memo.candidates(context.Background(), g, lm, opts)
	require.NoError(t, err)
	require.Same(t, &a[0], &b[0], "a hit returns the stored strategies")
	d, _, _, err := memo.candidates(context.Background(), g, lm2, opts)
	require.NoError(t, err)
	require.NotSame(t, &a[0], &d[0], "another mesh is another entry")
	f, _, _, err := memo.candidates(context.Background(), g, lm, Options{Cluster: c, Candidates: memo, Force: map[ir.ValueID]int{0: 0}})
	require.NoError(t, err)
	require.NotSame(t, &a[0], &f[0], "a forced solve enumerates its own")
	require.Len(t, memo.ents, 3)
	for i := range candMemoSize + 3 {
		_, _, _, err := memo.candidates(context.Background(), g, lm, Options{Cluster: c, DeviceFLOPS: float64(i + 1)})
		require.NoError(t, err)
	}
	require.Len(t, memo.ents, candMemoSize)
}
