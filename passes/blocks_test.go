package passes

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// blockNet is a two-block net whose blocks hold a matmul, a batch norm (kept in f32 under
// a half precision, between casts) and a relu; the loss lies in no block.
func blockNet(t *testing.T) *ir.Graph {
	b := frontend.NewBuilder("blocks")
	x := b.Input("x", ir.F32, ir.Shape{8, 4}, 0)
	for i := range 2 {
		s := b.Scope(fmt.Sprintf("l%d", i)).Block(i + 1)
		h := s.MatMul(x, s.Param("w", ir.F32, ir.Shape{4, 4}))
		h = s.BatchNorm(h, s.Param("gamma", ir.F32, ir.Shape{4}, frontend.Ones), s.Param("beta", ir.F32, ir.Shape{4}), 1e-5)
		x = s.Relu(h)
	}
	b.Output(b.Named("loss").ReduceMean(b.Mul(x, x), 0, 1))
	g, err := b.Build()
	require.NoError(t, err)
	return g
}

// TestBlocksFollowDerivation: every pass puts what it makes in the block of what it is
// made from. Each value of the step that is relative to another (a gradient, an adjoint,
// a rule's temporary, optimizer state, an update op) is in that value's block; a cast the
// precision pass adds is in the block of what it casts; Rebatch keeps every block, and a
// stage cut by Subgraph keeps them too, also where the value a gradient is of stayed in
// another stage.
func TestBlocksFollowDerivation(t *testing.T) {
	fwd := blockNet(t)
	mb, err := Rebatch(fwd, 4)
	require.NoError(t, err)
	for i := range fwd.Values {
		require.Equal(t, fwd.Values[i].Block, mb.Values[i].Block, mb.Values[i].Name)
	}
	opt := Optimizer{Kind: "adam", LR: 0.01, Precision: "mixed"}
	half, err := ApplyPrecision(mb, opt)
	require.NoError(t, err)
	step, err := TrainingStep(half, opt)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(step))

	counts := map[ir.Block]int{}
	casts := 0
	for i := range step.Values {
		v := &step.Values[i]
		counts[v.Block]++
		if of, ok := v.Prov.OfValue(); ok {
			assert.Equal(t, step.Values[of].Block, v.Block, "%s (%s of %s)", v.Name, v.Prov.Role, step.Values[of].Name)
		} else if v.Prov.IsForward() && v.Op == ir.OpCast {
			casts++
			assert.Equal(t, step.Values[v.Args[0]].Block, v.Block, "cast %s", v.Name)
		} else if !v.Prov.IsForward() {
			assert.Equal(t, ir.NoBlock, v.Block, "%s is shared by every block (%s)", v.Name, v.Prov.Role)
		}
	}
	assert.Positive(t, casts, "the f32 batch norms' casts")
	// Block 1 reads the data input, whose adjoint nothing needs: block 2 has two more.
	assert.Equal(t, counts[1]+2, counts[2])
	assert.Positive(t, counts[ir.NoBlock])

	// A stage holding block 2's backward but not its forward.
	var ids []ir.ValueID
	for i := range step.Values {
		if v := &step.Values[i]; v.Block == 2 && !v.Prov.IsForward() && !v.Op.IsLeaf() {
			ids = append(ids, ir.ValueID(i))
		}
	}
	sub, err := Subgraph(step, "backward2", ids)
	require.NoError(t, err)
	lost := 0
	for i := range sub.Values {
		v := &sub.Values[i]
		id, _ := step.Lookup(v.Name)
		require.Equal(t, step.Values[id].Block, v.Block, v.Name)
		if _, ok := step.Values[id].Prov.OfValue(); ok && v.Prov.Of == ir.NoValue {
			lost++
		}
	}
	assert.Positive(t, lost, "values whose Of stayed outside keep their block")
}
