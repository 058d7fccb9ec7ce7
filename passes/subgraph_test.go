package passes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

func TestSubgraphCutsAStage(t *testing.T) {
	g := attentionLike(t, 8, 4, 6)
	y, _ := g.Lookup("y")
	heads, _ := g.Lookup("heads")
	tr, _ := g.Lookup("tr")
	sub, err := Subgraph(g, "stage1", []ir.ValueID{heads, tr})
	require.NoError(t, err)
	require.NoError(t, ir.Verify(sub))
	want := "graph stage1\ninput y: f32[32,6] batch=0\nheads = reshape y shape=[8,4,2,3]\ntr = transpose heads perm=[0,2,1,3]\noutput tr\n"
	assert.Equal(t, want, sub.String())
	_ = y

	w, _ := g.Lookup("w")
	flat, _ := g.Lookup("flat")
	sub, err = Subgraph(g, "stage0", []ir.ValueID{flat, y})
	require.NoError(t, err)
	x, ok := sub.Lookup("x")
	require.True(t, ok)
	assert.Equal(t, 0, sub.Value(x).BatchDim())
	_, ok = sub.Lookup("w")
	assert.True(t, ok, "the param comes along")
	_ = w

	_, err = Subgraph(g, "bad", []ir.ValueID{tr, heads})
	require.ErrorContains(t, err, "not in graph order")
}
