package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

// TestRestrict: a solve restricted to the strategies an unrestricted solve chose finds that
// plan again, at its price, with fewer variables; restricted to another strategy of one
// matmul it chooses that strategy and costs no less than the optimum; restricted to that
// one and the optimum's it chooses the optimum's; a name no candidate has leaves its value
// free.
func TestRestrict(t *testing.T) {
	g := mlpStep(t, 8, 8, 3)
	lm := uniform(t, 2, 2)
	opts := Options{DeviceFLOPS: 1e12}
	ctx := context.Background()
	best, err := Solve(ctx, g, lm, opts)
	require.NoError(t, err)
	names := map[ir.ValueID][]string{}
	for i := range g.Values {
		names[ir.ValueID(i)] = []string{best.Strategies[i].Name}
	}
	ro := opts
	ro.Restrict = names
	same, err := Solve(ctx, g, lm, ro)
	require.NoError(t, err)
	assert.InDelta(t, best.Cost.Total, same.Cost.Total, 1e-12*best.Cost.Total)
	for i := range g.Values {
		assert.Equal(t, best.Strategies[i].Name, same.Strategies[i].Name, g.Values[i].Name)
	}
	assert.Less(t, same.ILP.Variables, best.ILP.Variables)

	z := lookup(t, g, "l2.z")
	cands, err := CandidatesWith(g, lm, opts)
	require.NoError(t, err)
	other := ""
	for _, s := range cands[z] {
		if s.Name != best.Strategies[z].Name {
			other = s.Name
			break
		}
	}
	require.NotEmpty(t, other)
	ro.Restrict = map[ir.ValueID][]string{z: {other}}
	got, err := Solve(ctx, g, lm, ro)
	require.NoError(t, err)
	assert.Equal(t, other, got.Strategies[z].Name)
	assert.GreaterOrEqual(t, got.Cost.Total, best.Cost.Total*(1-1e-12))

	// Two names: the ILP chooses between them, here the optimum's.
	ro.Restrict = map[ir.ValueID][]string{z: {other, best.Strategies[z].Name}}
	both, err := Solve(ctx, g, lm, ro)
	require.NoError(t, err)
	assert.InDelta(t, best.Cost.Total, both.Cost.Total, 1e-12*best.Cost.Total)
	assert.Equal(t, best.Strategies[z].Name, both.Strategies[z].Name)

	ro.Restrict = map[ir.ValueID][]string{z: {"no such strategy"}}
	free, err := Solve(ctx, g, lm, ro)
	require.NoError(t, err)
	assert.InDelta(t, best.Cost.Total, free.Cost.Total, 1e-12*best.Cost.Total)
}
