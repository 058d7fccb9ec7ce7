package sharding

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
)

// gptStep builds the SGD training step of a small f32 GPT from the zoo.
func gptStep(t testing.TB, layers, hidden, heads, seq, vocab, batch int) *ir.Graph {
	m := zoo.NewGPT()
	m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch, m.DType, m.Dropout = layers, hidden, heads, seq, vocab, batch, "f32", 0
	g, err := m.Build()
	require.NoError(t, err)
	g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01})
	require.NoError(t, err)
	return g
}

// TestGPTBlockMegatron: one GPT block on a 1×8 mesh with a large hidden size and a small
// batch splits its weights Megatron style: the fused qkv and the first MLP weight by output
// columns (heads), the attention output and the second MLP weight by rows.
func TestGPTBlockMegatron(t *testing.T) {
	g := gptStep(t, 1, 1024, 16, 8, 512, 2)
	r, err := Solve(context.Background(), g, uniform(t, 1, 8), Options{AlpaCompute: true})
	require.NoError(t, err)
	t.Logf("ilp %+v", r.ILP)
	for _, tc := range []struct{ param, spec string }{
		{"l0.attn.qkv.w", "RS1"},
		{"l0.attn.o.w", "S1R"}, {"l0.mlp.w1.w", "RS1"}, {"l0.mlp.w2.w", "S1R"},
	} {
		assert.Equal(t, tc.spec, r.Specs[lookup(t, g, tc.param)].String(), tc.param)
	}
}
