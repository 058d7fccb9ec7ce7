package autopar

import (
	"bytes"
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime/interp"
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

// Batch norm per micro-batch (Options.BatchNorm "microbatch", as GPipe and Alpa take its
// statistics): Wide-ResNet compiles with several micro-batches, the plan says so, and its
// programs equal the serial step of the model whose batch norms take each micro-batch's
// statistics (Plan.Forward): pipelined, and data-parallel with the statistics of each
// micro-batch synchronized across the devices that share it. In f64: batch norm's
// gradient over a micro-batch of 2 images cancels to a few digits in f32 (relative
// differences of 1e-2 by the third step, either way round), so f64 shows the equality to 1e-9.
func TestMicrobatchBatchNormEqualsSerial(t *testing.T) {
	m, err := zoo.NewPreset("wresnet-tiny")
	require.NoError(t, err)
	m.(*zoo.WResNet).DType = "f64"
	g, err := m.Build()
	require.NoError(t, err)
	cases := []struct {
		name string
		opts Options
	}{
		{"pipeline", Options{Microbatches: 4, Layers: 2, Manual: &Manual{TP: 1, PP: 2, DP: 1}}},
		{"data-parallel", Options{Microbatches: 2, Layers: 2, Manual: &Manual{TP: 1, PP: 1, DP: 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster(t, "cpu:2")
			c.IntraHostLatency, c.InterHostLatency = 1e-7, 1e-7
			tc.opts.BatchNorm = BatchNormMicrobatch
			p := compile(t, g, c, tc.opts)
			require.Equal(t, tc.opts.Microbatches, p.Microbatches)
			assert.Equal(t, "microbatch", p.BatchNorm)
			groups := 0
			for _, v := range p.Forward().Values {
				if v.Op == ir.OpBatchNorm {
					require.Equal(t, 8/tc.opts.Microbatches, v.Attrs.Int("group"), v.Name)
					groups++
				}
			}
			require.Positive(t, groups)
			if tc.opts.Manual.DP > 1 {
				synced := 0
				for _, s := range p.Stages {
					for _, v := range s.Values {
						if v.Op == ir.OpBatchNorm.String() && v.In[0].Dims[0] != 0 {
							synced++
						}
					}
				}
				require.Positive(t, synced, "no batch_norm splits its micro-batch")
			}
			checkAgainstSerial(t, p, 1e-9)
		})
	}
}

// The serial reference really is per micro-batch: the plan's step differs from the model's
// whole-batch one, and the whole-batch model with several micro-batches is refused with a
// hint at the option, while auto takes only one micro-batch.
func TestMicrobatchBatchNormChangesTheStep(t *testing.T) {
	g := model(t, "wresnet-tiny")
	c := cluster(t, "cpu:2")
	_, err := Compile(context.Background(), g, c, Options{Microbatches: 2, Layers: 2})
	require.ErrorContains(t, err, "2 micro-batches would change what")
	require.ErrorContains(t, err, "--batch-norm microbatch")
	dp2 := &Manual{TP: 1, PP: 1, DP: 2}
	p := compile(t, g, c, Options{Layers: 2, Manual: dp2})
	assert.Equal(t, 1, p.Microbatches, "auto under step statistics")
	assert.Empty(t, p.BatchNorm)

	p = compile(t, g, c, Options{Microbatches: 2, Layers: 2, BatchNorm: BatchNormMicrobatch, Manual: dp2})
	full, err := passes.TrainingStep(p.Forward(), p.Optimizer.Optimizer())
	require.NoError(t, err)
	whole, err := passes.TrainingStep(g, p.Optimizer.Optimizer())
	require.NoError(t, err)
	feeds := interp.InitParams(full, 1)
	data, err := interp.GenerateInputs(full, 2)
	require.NoError(t, err)
	maps.Copy(feeds, data)
	a, err := interp.Run(context.Background(), full, feeds)
	require.NoError(t, err)
	b, err := interp.Run(context.Background(), whole, feeds)
	require.NoError(t, err)
	assert.Greater(t, relErr(a.Outputs[0], b.Outputs[0]), 1e-6, "per-micro-batch statistics give another loss")

	// plan.json keeps the choice: the plan read back computes the same step, and refuses
	// to be read without it.
	var buf bytes.Buffer
	require.NoError(t, p.WriteJSON(&buf))
	back, err := ReadPlan(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	assert.Equal(t, p.Forward().String(), back.Forward().String())
	assert.Equal(t, g.String(), back.ModelIR, "plan.json holds the model as the user wrote it")
	edited := strings.Replace(buf.String(), `"batch_norm": "microbatch",`, "", 1)
	require.NotEqual(t, buf.String(), edited)
	_, err = ReadPlan(strings.NewReader(edited))
	require.ErrorContains(t, err, "2 micro-batches would change what")
	_, err = ReadPlan(strings.NewReader(strings.Replace(buf.String(), `"batch_norm": "microbatch"`, `"batch_norm": "ghost"`, 1)))
	require.ErrorContains(t, err, `batch_norm "ghost", expected "microbatch" or none`)

	_, err = Compile(context.Background(), g, c, Options{BatchNorm: "ghost"})
	require.ErrorContains(t, err, `batch norm "ghost": expected step`)
}
