package passes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
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

// A stage keeps what each value is: the gradient of a param it holds stays marked as such,
// with Of mapped to the stage's IDs, and Of becomes NoValue where the value it names is in
// another stage.
func TestSubgraphKeepsProvenance(t *testing.T) {
	step, err := TrainingStep(model(t, "mlp-tiny"), Optimizer{Kind: "adam", LR: 0.01})
	require.NoError(t, err)
	var ids []ir.ValueID
	for i := range step.Values {
		if r := step.Values[i].Prov.Role; r == ir.RoleGrad || r == ir.RoleState || r == ir.RoleUpdate {
			ids = append(ids, ir.ValueID(i))
		}
	}
	sub, err := Subgraph(step, "update", ids)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(sub))
	w, _ := step.Lookup("l0.fc.w")
	gw, ok := step.GradOf(w)
	require.True(t, ok)
	sw, _ := sub.Lookup("l0.fc.w")
	sgw, ok := sub.GradOf(sw)
	require.True(t, ok, "the param comes along with its update, and its gradient stays marked")
	assert.Equal(t, step.Value(gw).Name, sub.Value(sgw).Name)
	m, _ := sub.Lookup("l0.fc.w.m")
	assert.Equal(t, ir.Prov{Role: ir.RoleState, Of: sw, Slot: "m"}, sub.Value(m).Prov)
	assert.Less(t, sgw, sw, "the param comes in at its first use, after its gradient")
	back, err := frontend.Parse("update.ir", []byte(sub.String()))
	require.NoError(t, err, "of= may name a later value")
	assert.Equal(t, sub.String(), back.String())

	fwd, err := Subgraph(step, "backward", []ir.ValueID{gw})
	require.NoError(t, err)
	g, _ := fwd.Lookup(step.Value(gw).Name)
	assert.Equal(t, ir.Prov{Role: ir.RoleGrad, Of: ir.NoValue}, fwd.Value(g).Prov, "the param is not read: Of is cut")
}
