package zoo

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

func TestNamesAndNew(t *testing.T) {
	assert.Equal(t, []string{"gpt", "mlp", "moe", "wresnet"}, Names())
	for _, n := range Names() {
		m, err := New(n)
		require.NoError(t, err)
		assert.Equal(t, n, m.Name())
		g, err := m.Build()
		require.NoError(t, err, n)
		assert.Equal(t, n, g.Name)
		require.NoError(t, ir.Verify(g))
		loss := g.Value(g.Outputs[0].Value)
		assert.Zero(t, loss.Type.Shape.Rank(), "%s: the first output must be the scalar loss", n)
	}
	_, err := New("bert")
	require.Error(t, err)
	assert.Equal(t, `unknown model "bert", want one of gpt, mlp, moe, wresnet`, err.Error())
}

func TestPresets(t *testing.T) {
	names := PresetNames()
	assert.Len(t, names, 4+7+7+7)
	seen := map[string]bool{}
	for _, p := range Presets() {
		assert.False(t, seen[p.Name], "preset %s listed twice", p.Name)
		seen[p.Name] = true
		m, err := NewPreset(p.Name)
		require.NoError(t, err)
		assert.Equal(t, p.Model, m.Name())
	}
	_, err := NewPreset("gpt-1t")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown preset "gpt-1t", want one of mlp-tiny, gpt-tiny,`)
}

// TestPresetParamCounts holds each paper-size preset to the size the paper names it by:
// the configs come from Alpa's benchmark suite, so a block built wrong (a missing
// projection, a wrong expansion factor) shows up here.
func TestPresetParamCounts(t *testing.T) {
	for _, p := range Presets() {
		if p.Nominal == 0 {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			m, err := NewPreset(p.Name)
			require.NoError(t, err)
			g, err := m.Build()
			require.NoError(t, err)
			n := float64(ParamCount(g))
			assert.InEpsilon(t, p.Nominal, n, 0.06, "%s has %.4g params", p.Name, n)
		})
	}
}

// TestGPTFLOPs checks the forward FLOPs of GPT against the closed form of Megatron-LM
// (Narayanan et al. 2021) without the backward factor: 2·B·S·(12·L·H² + V·H) for the
// matmuls plus 4·B·S²·H·L for attention scores and context. Only the small elementwise ops
// are outside the formula.
func TestGPTFLOPs(t *testing.T) {
	for _, name := range []string{"gpt-350m", "gpt-1.3b", "gpt-39b"} {
		m, err := NewPreset(name)
		require.NoError(t, err)
		gpt := m.(*GPT)
		g, err := m.Build()
		require.NoError(t, err)
		B, S, H, L, V := float64(gpt.Batch), float64(gpt.Seq), float64(gpt.Hidden), float64(gpt.Layers), float64(gpt.Vocab)
		want := 2*B*S*(12*L*H*H+V*H) + 4*B*S*S*H*L
		assert.InEpsilon(t, want, g.TotalFLOPs(), 0.03, name)
	}
}

// TestKnobsAlias checks that setting a knob through Params changes what Build makes.
func TestKnobsAlias(t *testing.T) {
	for _, name := range Names() {
		m, err := New(name)
		require.NoError(t, err)
		g0, err := m.Build()
		require.NoError(t, err)
		var batch *int
		for _, p := range m.Params() {
			n := 0
			for _, ptr := range []bool{p.Int != nil, p.Float != nil, p.String != nil, p.Bool != nil} {
				if ptr {
					n++
				}
			}
			assert.Equal(t, 1, n, "%s: knob %s must have exactly one value pointer", name, p.Name)
			assert.NotEmpty(t, p.Usage)
			if p.Name == "batch" {
				batch = p.Int
			}
		}
		require.NotNil(t, batch, "%s has no batch knob", name)
		*batch *= 2
		g1, err := m.Build()
		require.NoError(t, err)
		in0, in1 := g0.Value(g0.Leaves(ir.OpInput)[0]), g1.Value(g1.Leaves(ir.OpInput)[0])
		assert.Equal(t, 2*in0.Type.Shape[0], in1.Type.Shape[0], name)
		assert.Equal(t, ParamCount(g0), ParamCount(g1), "%s: batch must not change the params", name)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		model string
		set   func(Model)
		want  string
	}{
		{"gpt", func(m Model) { m.(*GPT).Hidden = 30 }, "gpt: hidden 30 is not divisible by heads 4"},
		{"gpt", func(m Model) { m.(*GPT).Layers = 0 }, "gpt: layers must be at least 1, got 0"},
		{"gpt", func(m Model) { m.(*GPT).DType = "i32" }, `gpt: dtype must be one of f32, f16, bf16, f64, got "i32"`},
		{"gpt", func(m Model) { m.(*GPT).Dropout = 1 }, "gpt: dropout must be in [0, 1), got 1"},
		{"moe", func(m Model) { m.(*MoE).Group = 48 }, "moe: batch·seq 128 is not divisible by group 48"},
		{"moe", func(m Model) { m.(*MoE).Experts = 0 }, "moe: experts must be at least 1, got 0"},
		{"moe", func(m Model) { m.(*MoE).Capacity = 0 }, "moe: capacity must be positive, got 0"},
		{"mlp", func(m Model) { m.(*MLP).Classes = -1 }, "mlp: classes must be at least 1, got -1"},
		{"mlp", func(m Model) { m.(*MLP).Layers = -1 }, "mlp: layers must be at least 0, got -1"},
		{"wresnet", func(m Model) { m.(*WResNet).Depth = 51 }, "wresnet: depth must be one of 10, 14, 18, 26, 34, 50, 101, 152, 200, got 51"},
	}
	for _, c := range cases {
		m, err := New(c.model)
		require.NoError(t, err)
		c.set(m)
		g, err := m.Build()
		assert.Nil(t, g)
		if assert.Error(t, err, c.want) {
			assert.Equal(t, c.want, err.Error())
		}
	}
}

// TestLayerNames checks the naming scheme later passes may cluster by.
func TestLayerNames(t *testing.T) {
	cases := map[string][]string{
		"gpt":     {"l0.attn.qkv", "l0.attn.qkv.w", "l0.attn.q.heads", "l1.attn.probs", "l1.mlp.w1", "l1.res2", "lnf.gamma", "logits", "loss"},
		"moe":     {"l0.mlp.w1", "l1.moe.wg", "l1.moe.gates", "l1.moe.combine", "l1.moe.dispatch", "l1.moe.expert_out"},
		"mlp":     {"l0.fc.w", "l1.relu", "logits", "loss"},
		"wresnet": {"stem.conv", "s0.b0.conv1", "s0.b0.proj", "s3.b0.conv3.bn.gamma", "fc.w", "loss"},
	}
	for name, want := range cases {
		m, err := New(name)
		require.NoError(t, err)
		g, err := m.Build()
		require.NoError(t, err)
		for _, n := range want {
			_, ok := g.Lookup(n)
			assert.True(t, ok, "%s has no value %s", name, n)
		}
	}
}

// TestWResNetShapes follows the spatial size through the stem and the four stages of a
// paper-size preset: 224 → 112 (stem conv) → 56 (pool) → 56, 28, 14, 7, with 4·f channels.
func TestWResNetShapes(t *testing.T) {
	m, err := NewPreset("wresnet-1b")
	require.NoError(t, err)
	g, err := m.Build()
	require.NoError(t, err)
	want := map[string]ir.Shape{
		"stem.conv": {1536, 320, 112, 112}, "stem.pool": {1536, 320, 56, 56},
		"s0.b2.out": {1536, 1280, 56, 56}, "s1.b3.out": {1536, 2560, 28, 28},
		"s2.b5.out": {1536, 5120, 14, 14}, "s3.b2.out": {1536, 10240, 7, 7},
		"s1.b0.conv2": {1536, 1280, 28, 28}, "features": {1536, 10240}, "fc": {1536, 1024},
	}
	for name, s := range want {
		id, ok := g.Lookup(name)
		if assert.True(t, ok, name) {
			assert.Equal(t, s, g.Value(id).Type.Shape, name)
		}
	}
}

// TestGPTOptions covers the knobs the presets leave at their defaults: dropout emits one
// op after the embedding and two per layer, each with its own seed; an untied head adds a
// [hidden, vocab] matrix.
func TestGPTOptions(t *testing.T) {
	m := NewGPT()
	m.Dropout = 0.1
	g, err := m.Build()
	require.NoError(t, err)
	seeds := map[int]bool{}
	for _, v := range g.Values {
		if v.Op == ir.OpDropout {
			assert.Equal(t, 0.1, v.Attrs.Float("rate"))
			seeds[v.Attrs.Int("seed")] = true
		}
	}
	assert.Len(t, seeds, 1+2*m.Layers, "one distinct seed per dropout op")

	tied, err := NewGPT().Build()
	require.NoError(t, err)
	m = NewGPT()
	m.Tied = false
	untied, err := m.Build()
	require.NoError(t, err)
	_, ok := untied.Lookup("head.w")
	assert.True(t, ok)
	assert.Equal(t, ParamCount(tied)+int64(m.Hidden*m.Vocab), ParamCount(untied))
}

// TestWResNetBlocks: each residual block is a block of its own (ir.Value.Block, numbered
// from 1 in build order) and the stem, the pool, the classifier and the loss are in none,
// so that the identical blocks of a stage tie in the sharding ILP and the default layer
// count sees one block per residual block, as Alpa's one auto layer per block.
func TestWResNetBlocks(t *testing.T) {
	for _, tc := range []struct {
		depth  int
		blocks int
	}{{14, 4}, {50, 16}, {18, 8}} {
		m := NewWResNet()
		m.Depth = tc.depth
		g, err := m.Build()
		require.NoError(t, err)
		blocks, any := g.Blocks()
		require.True(t, any)
		seen := map[ir.Block]bool{}
		for i, v := range g.Values {
			var want ir.Block
			var stage, blk int
			if n, _ := fmt.Sscanf(v.Name, "s%d.b%d.", &stage, &blk); n == 2 {
				want = ir.Block(blockIndex(bottleneckStages, basicStages, tc.depth, stage, blk))
			}
			assert.Equal(t, want, blocks[i], "depth %d: %s", tc.depth, v.Name)
			if blocks[i] != ir.NoBlock {
				seen[blocks[i]] = true
			}
		}
		assert.Len(t, seen, tc.blocks, "depth %d", tc.depth)
	}
}

// blockIndex is the 1-based number of block j of stage i in build order.
func blockIndex(bottleneck, basic map[int][]int, depth, i, j int) int {
	stages := bottleneck[depth]
	if stages == nil {
		stages = basic[depth]
	}
	n := 0
	for s := range i {
		n += stages[s]
	}
	return n + j + 1
}
