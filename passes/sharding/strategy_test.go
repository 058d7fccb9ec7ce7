package sharding

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

func names(ss []Strategy) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Name
	}
	return out
}

func candidatesOf(t *testing.T, g *ir.Graph, lm *mesh.LogicalMesh, name string) []Strategy {
	t.Helper()
	cands, err := Candidates(g, lm)
	require.NoError(t, err)
	return cands[lookup(t, g, name)]
}

func TestStrategiesFromDims(t *testing.T) {
	b := newGB(t, "s")
	x := b.input("x", 8, 4)
	w := b.param("w", 4, 6)
	b.op(ir.OpMatMul, "mm", nil, x, w)
	b.op(ir.OpSoftmax, "sm", ir.Attrs{}.With("axis", 1), x)
	odd := b.param("odd", 3, 5)
	b.op(ir.OpRelu, "oddrelu", nil, odd)
	table := b.param("table", 16, 4)
	ids := b.declare(ir.OpInput, "ids", ir.Type{DType: ir.I32, Shape: ir.Shape{8}}, 0)
	b.op(ir.OpGather, "emb", nil, table, ids)
	logits := b.param("logits", 8, 16)
	b.op(ir.OpSparseCrossEntropy, "ce", nil, logits, ids)
	lm := uniform(t, 2, 2)
	g := b.g

	mm := names(candidatesOf(t, g, lm, "mm"))
	for _, want := range []string{
		"RR = RR x RR",                             // replicated
		"S0R = S0R x RR",                           // data parallel on axis 0
		"RS1 = RR x RS1",                           // column split
		"RR = RS1 x S1R (all_reduce 1)",            // row split, partial summed in the op
		"S1R = RS1 x S1R (reduce_scatter 1 dim 0)", // or scattered
		"S0S1 = S0R x RS1",                         // 2-D
		"S01R = S01R x RR",                         // both axes on the batch
	} {
		assert.Contains(t, mm, want)
	}
	assert.NotContains(t, mm, "RS01 = RR x RS01", "6 columns do not split 4 ways")

	for _, s := range candidatesOf(t, g, lm, "sm") {
		assert.Equal(t, mesh.AxesNone, s.Out.Dims[1], "softmax's axis is never split: %s", s.Name)
	}
	assert.Equal(t, []string{"RR = RR"}, names(candidatesOf(t, g, lm, "oddrelu")), "no axis divides 3 or 5: replicated")
	for _, s := range candidatesOf(t, g, lm, "x") {
		assert.Equal(t, mesh.AxesNone, s.Out.Dims[1], "an input splits only its batch dim: %s", s.Name)
	}
	assert.Contains(t, names(candidatesOf(t, g, lm, "emb")), "RR = S0R x R (all_reduce 0)", "vocab-parallel embedding")
	// Cross-entropy's class dim is fixed by its signature: the vocab-parallel form needs
	// collectives inside the op, which codegen does not emit (docs/DECISIONS.md).
	for _, s := range candidatesOf(t, g, lm, "ce") {
		assert.Equal(t, mesh.AxesNone, s.In[0].Dims[1], "cross-entropy's classes are never split: %s", s.Name)
		assert.Empty(t, s.Collectives, s.Name)
	}
}

func TestStrategyCosts(t *testing.T) {
	b := newGB(t, "c")
	x := b.input("x", 8, 4)
	w := b.param("w", 4, 6)
	b.op(ir.OpMatMul, "mm", nil, x, w)
	lm := uniform(t, 2, 2)
	seen := 0
	for _, s := range candidatesOf(t, b.g, lm, "mm") {
		seen++
		switch s.Name {
		case "RR = RR x RR":
			assert.Equal(t, 2.0*8*4*6, s.Compute, "1 FLOP/s, replicated")
			assert.Equal(t, int64(8*6*4), s.Memory)
		case "S0S1 = S0R x RS1":
			assert.Equal(t, 2.0*8*4*6/4, s.Compute)
			assert.Equal(t, int64(8*6*4/4), s.Memory)
		case "RR = RS1 x S1R (all_reduce 1)":
			assert.Equal(t, 1+2*0.5*8*6*4, s.Comm, "α + 2β(n−1)/n·B with B = the 192-byte result")
		case "S1R = RS1 x S1R (reduce_scatter 1 dim 0)":
			assert.Equal(t, 1+0.5*8*6*4, s.Comm, "α + β(n−1)/n·B")
			assert.Equal(t, int64(8*6*4/2), s.Memory)
		default:
			seen--
		}
	}
	assert.Equal(t, 4, seen, "every hand-checked strategy is a candidate")
}

// batch_norm may split its batch (synchronized batch norm): the strategy carries the two
// all-reduces of its per-channel mean and variance over the batch's axes, priced as they
// run; the spatial dims stay whole.
func TestSyncBatchNormStrategies(t *testing.T) {
	b := newGB(t, "bn")
	x := b.input("x", 8, 6, 4, 4)
	gamma, beta := b.param("gamma", 6), b.param("beta", 6)
	b.op(ir.OpBatchNorm, "bn", ir.Attrs{}.With("eps", 1e-5), x, gamma, beta)
	lm := uniform(t, 2, 2)
	cands := candidatesOf(t, b.g, lm, "bn")
	var synced int
	for _, s := range cands {
		assert.Equal(t, mesh.AxesNone, s.Out.Dims[2], "%s: the spatial dims stay whole", s.Name)
		assert.Equal(t, mesh.AxesNone, s.Out.Dims[3], s.Name)
		axes := s.In[0].Dims[0]
		if axes == mesh.AxesNone {
			assert.Empty(t, s.Collectives, s.Name)
			continue
		}
		synced++
		local, err := lm.LocalShape(ir.Shape{8, 6, 4, 4}, s.Out)
		require.NoError(t, err)
		require.Len(t, s.Collectives, 2, s.Name)
		for _, c := range s.Collectives {
			assert.Equal(t, mesh.AllReduce, c.Kind)
			assert.Equal(t, axes, c.Axes)
			assert.Equal(t, float64(local[1]*4), c.Bytes, "%s: one f32 per local channel", s.Name)
		}
		assert.InDelta(t, 2*lm.Cost(mesh.AllReduce, axes, float64(local[1]*4)), s.Comm, 1e-15, s.Name)
	}
	assert.Contains(t, names(cands), "S0RRR = S0RRR x R x R (sync all_reduce 0 ×2)")
	assert.Contains(t, names(cands), "S0S1RR = S0S1RR x S1 x S1 (sync all_reduce 0 ×2)", "batch and channels split together")
	assert.Positive(t, synced)
}
