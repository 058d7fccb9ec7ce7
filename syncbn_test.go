package autopar

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
)

// A data-parallel Wide-ResNet with synchronized batch norm, as the compiler plans it: at
// batch 32 on two CPU devices whose collectives start fast (0.1 µs), the ILP splits the
// batch of some batch_norms (their mean and variance all-reduced over it, priced in the
// strategy) and the channels of others, and the programs equal the serial step. (At the
// cpu preset's 5 µs latency it splits channels throughout, and on two A100s this tiny
// model runs replicated: codegen's TestEquivSyncBatchNorm forces the batch split
// everywhere.)
func TestCompiledSyncBatchNormEqualsSerial(t *testing.T) {
	g, err := passes.Rebatch(model(t, "wresnet-tiny"), 32)
	require.NoError(t, err)
	c := cluster(t, "cpu:2")
	c.IntraHostLatency, c.InterHostLatency = 1e-7, 1e-7
	p := compile(t, g, c, Options{Microbatches: 1, Layers: 2, Manual: &Manual{TP: 1, PP: 1, DP: 2}})
	synced := 0
	for _, s := range p.Stages {
		for _, v := range s.Values {
			if v.Op != ir.OpBatchNorm.String() || v.In[0].Dims[0] == 0 {
				continue
			}
			synced++
			assert.Contains(t, v.Strategy, "(sync all_reduce 0 ×2)", v.Name)
			assert.Positive(t, v.Comm, "%s: the statistics' all-reduces are priced", v.Name)
		}
	}
	require.Positive(t, synced, "no batch_norm splits its batch")
	checkAgainstSerial(t, p, 1e-4)
}
