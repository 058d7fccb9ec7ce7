package codegen_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
)

// BenchmarkLower times Lower on GPT steps of growing depth: data parallel on a 2×2 mesh,
// and a 2-stage 1F1B pipeline of 1×2 meshes with 4 micro-batches. Plans are built outside
// the timer; instrs/op reports the instructions emitted, all devices together.
func BenchmarkLower(b *testing.B) {
	for _, layers := range []int{1, 2, 4, 8} {
		m := zoo.NewGPT()
		m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = layers, 64, 4, 32, 128, 8
		fwd, err := m.Build()
		require.NoError(b, err)
		mb, err := passes.Rebatch(fwd, 2)
		require.NoError(b, err)
		step, err := passes.TrainingStep(mb, passes.Optimizer{Kind: "adam", LR: 0.01})
		require.NoError(b, err)
		plans := map[string]func(testing.TB, *ir.Graph) *codegen.Plan{
			"dp-2x2":         singleStage(2, 2, 4, dataParallel(mesh.AxesBoth), propagate),
			"pipeline-2x1x2": pipeline([][2]int{{1, 2}, {1, 2}}, 4, program.OneFOneB, dataParallel(mesh.Axis1), propagate),
		}
		for _, name := range []string{"dp-2x2", "pipeline-2x1x2"} {
			p := plans[name](b, step)
			b.Run(fmt.Sprintf("%s/layers=%d", name, layers), func(b *testing.B) {
				instrs := 0
				for b.Loop() {
					progs, err := codegen.Lower(p)
					if err != nil {
						b.Fatal(err)
					}
					instrs = 0
					for _, pr := range progs {
						instrs += len(pr.Instrs)
					}
				}
				b.ReportMetric(float64(instrs), "instrs/op")
			})
		}
	}
}

// BenchmarkLowerMicrobatches lowers the same 2-layer GPT micro-batch step as a 2-stage 1F1B
// pipeline for 4 … 4,096 micro-batches: the programs (json-bytes/op, all devices' JSON
// forms together), the time to lower, validate and predict them, and the memory it takes
// stay flat, since the schedule's loops, not the instructions, carry the micro-batch count.
func BenchmarkLowerMicrobatches(b *testing.B) {
	m := zoo.NewGPT()
	m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = 2, 64, 4, 32, 128, 2
	fwd, err := m.Build()
	require.NoError(b, err)
	step, err := passes.TrainingStep(fwd, passes.Optimizer{Kind: "adam", LR: 0.01})
	require.NoError(b, err)
	for _, mbs := range []int{4, 64, 1024, 4096} {
		p := pipeline([][2]int{{1, 2}, {1, 2}}, mbs, program.OneFOneB, dataParallel(mesh.Axis1), propagate)(b, step)
		b.Run(fmt.Sprintf("microbatches=%d", mbs), func(b *testing.B) {
			size := 0
			for b.Loop() {
				progs, err := codegen.Lower(p)
				if err != nil {
					b.Fatal(err)
				}
				codegen.Predict(p, progs)
				size = 0
				for _, pr := range progs {
					data, err := pr.MarshalJSON()
					if err != nil {
						b.Fatal(err)
					}
					size += len(data)
				}
			}
			b.ReportMetric(float64(size), "json-bytes/op")
		})
	}
}
