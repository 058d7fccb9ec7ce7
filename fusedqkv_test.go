package autopar

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// layerValue matches the values of transformer layer i and their gradients: l3.attn.o.einsum,
// d.l3.ln1.layer_norm.
var layerValue = regexp.MustCompile(`^(d\.)?l[0-9]+\.`)

// TestFusedQKVAllReduces counts the all-reduces of a tensor-parallel GPT (--plan tp=2, one
// micro-batch) in its compiled programs. Megatron-LM's layer has exactly four: the forward
// of the attention output and of the second MLP projection (row-parallel: partial sums),
// and in the backward the input gradients of the fused qkv and of the first MLP projection
// (column-parallel). Three separate q, k and v projections make it six: each one's input
// gradient is reduced on its own. Outside the layers the step has two more: the input
// gradient of the vocabulary-parallel logits and the loss. The tied embedding's gradient
// is not all-reduced: it stays split by vocabulary rows, the update runs on the shards,
// and the new table is all-gathered once per step (half an all-reduce's bytes), which the
// search prices since resharding is priced once per layout and the update once per step.
// The plan is priced by FLOPs alone with flat alpha–beta collectives (flatCluster), for one
// sequence (batch 1), so that the two devices cannot split the batch: on this tiny model
// data parallelism is cheaper than Megatron's layout wherever it is possible (with batch 8
// the ILP chose Megatron's layout only while it left the layer norms' in-group reshardings
// unpriced: docs/DECISIONS.md, "Round eleven, objcost"), and under the cpu preset's
// roofline.
func TestFusedQKVAllReduces(t *testing.T) {
	count := func(layers int, fused bool) (inLayers, total int) {
		m := zoo.NewGPT()
		m.Layers, m.FusedQKV = layers, fused
		m.Batch = 1 // one sequence: the two devices can only split the model
		g, err := m.Build()
		require.NoError(t, err)
		p := compile(t, g, flatCluster(t, 2), Options{Microbatches: 1, Manual: &Manual{TP: 2, PP: 1, DP: 1}})
		progs, err := p.Programs()
		require.NoError(t, err)
		require.Len(t, progs, 2)
		for _, in := range progs[0].Instrs {
			if in.Kind != program.AllReduce {
				continue
			}
			total++
			if layerValue.MatchString(progs[0].Buffers[in.Args[0]].Name) {
				inLayers++
			}
		}
		return inLayers, total
	}
	for _, L := range []int{1, 2, 3} {
		in, total := count(L, true)
		assert.Equal(t, 4*L, in, "fused qkv, %d layers: all-reduces inside the layers", L)
		assert.Equal(t, 4*L+2, total, "fused qkv, %d layers: all-reduces of the step", L)
	}
	in, _ := count(2, false)
	assert.Equal(t, 6*2, in, "three projections, 2 layers: all-reduces inside the layers")
}

// flatCluster is testdata/clusters/cpu4-flat.json on n devices: the cpu cluster priced as
// before the roofline, by FLOPs alone (no memory term, no kernel overhead) with the flat
// alpha–beta model for every collective (its measured-fit entries are α + β·bytes sent).
func flatCluster(t testing.TB, n int) *mesh.Cluster {
	t.Helper()
	c := cluster(t, "testdata/clusters/cpu4-flat.json")
	c.DevicesPerHost = n
	var fits []mesh.CollectiveFit
	for _, f := range c.Collectives {
		if f.Devices <= n {
			fits = append(fits, f)
		}
	}
	c.Collectives = fits
	require.NoError(t, c.Validate())
	return c
}
