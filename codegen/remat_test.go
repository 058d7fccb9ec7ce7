package codegen_test

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// recomputed makes the stages of plan that stages names (all when none) recompute their
// activations.
func recomputed(plan func(t testing.TB, step *ir.Graph) *codegen.Plan, stages ...int) func(t testing.TB, step *ir.Graph) *codegen.Plan {
	return func(t testing.TB, step *ir.Graph) *codegen.Plan {
		p := plan(t, step)
		for i := range p.Stages {
			if len(stages) == 0 {
				p.Stages[i].Recompute = true
			}
		}
		for _, i := range stages {
			p.Stages[i].Recompute = true
		}
		return p
	}
}

// Recomputed plans equal the serial step too, and the runtime's counters (peak memory
// included) equal Predict's: runEquiv checks both.
func TestEquivRecompute(t *testing.T) {
	two := [][2]int{{1, 1}, {1, 1}}
	twoDP := [][2]int{{1, 2}, {1, 2}}
	four := [][2]int{{1, 1}, {1, 1}, {1, 1}, {1, 1}}
	rng := rand.New(rand.NewSource(11))
	cases := []equivCase{
		{name: "mlp-dp-1x2", fwd: mlp(2), opt: sgd, b: 2, plan: recomputed(singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate))},
		{name: "mlp-megatron-2x2", fwd: mlp(1), opt: adam, b: 2, plan: recomputed(singleStage(2, 2, 2, megatron, propagate))},
		{name: "mlp-2-stage-gpipe", fwd: mlp(1), opt: sgd, b: 2, plan: recomputed(pipeline(two, 2, program.GPipe, dataParallel(0), propagate))},
		{name: "mlp-2-stage-1f1b-first", fwd: mlp(1), opt: adam, b: 4, plan: recomputed(pipeline(two, 4, program.OneFOneB, dataParallel(0), propagate), 0)},
		{name: "mlp-4-stage-1f1b", fwd: mlp(3), opt: sgd, b: 4, plan: recomputed(pipeline(four, 4, program.OneFOneB, dataParallel(0), propagate))},
		{name: "mlp-4-stage-gpipe-odd", fwd: mlp(3), opt: adam, b: 4, plan: recomputed(pipeline(four, 4, program.GPipe, dataParallel(0), propagate), 1, 3)},
		{name: "gpt-dp-1x2", fwd: gpt, opt: sgd, b: 2, plan: recomputed(singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate))},
		{name: "gpt-random-2x2", fwd: gpt, opt: sgd, b: 1, plan: recomputed(singleStage(2, 2, 1, randomLeaves(rng), randomChooser(rng)))},
		{name: "gpt-2-stage-dp-1f1b", fwd: gpt, opt: sgd, b: 2, plan: recomputed(pipeline(twoDP, 2, program.OneFOneB, dataParallel(mesh.Axis1), propagate))},
		{name: "mlp-2-stage-random-cross-mesh", fwd: mlp(1), opt: adam, b: 2, plan: recomputed(pipeline([][2]int{{1, 2}, {2, 1}}, 2, program.OneFOneB, randomLeaves(rng), randomChooser(rng)))},
		{name: "moe-random-2x2", fwd: moe, opt: sgd, b: 1, plan: recomputed(singleStage(2, 2, 1, randomLeaves(rng), randomChooser(rng)))},
		{name: "wresnet-dp-1x2", fwd: wresnet, opt: sgd, b: 1, plan: recomputed(singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate))},
		{name: "gpt-2-stage-gpipe-last", fwd: gpt, opt: sgd, b: 4, plan: recomputed(pipeline(two, 4, program.GPipe, dataParallel(0), propagate), 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}

// Recomputation trades compute for memory: under GPipe with 8 micro-batches, a recomputing
// stage holds its inputs for each micro-batch instead of all its activations, so the
// predicted peak of the hidden layers' stages drops; its backward block runs the forward's
// ops again, so it computes more; and it moves the same bytes between stages (the
// recomputation sends nothing). The last stage is the counter-example the search must
// price: its input (a [2,16] relu) is larger than what its backward keeps (the [2,8]
// logits and the labels), so recomputing it holds more.
func TestRecomputeHoldsLess(t *testing.T) {
	step := microStep(t, 3, 8, sgd)
	four := [][2]int{{1, 1}, {1, 1}, {1, 1}, {1, 1}}
	lower := func(remat bool) ([]*program.Program, []codegen.DeviceCounters) {
		plan := pipeline(four, 8, program.GPipe, dataParallel(0), propagate)
		if remat {
			plan = recomputed(plan)
		}
		p := plan(t, step)
		progs, err := codegen.Lower(p)
		require.NoError(t, err)
		return progs, codegen.Predict(p, progs)
	}
	plainProgs, plain := lower(false)
	rematProgs, remat := lower(true)
	computes := func(p *program.Program, block int) (n int) {
		for _, in := range p.Instrs[p.Blocks[block].Start:p.Blocks[block].End] {
			if in.Kind == program.Compute {
				n++
			}
		}
		return n
	}
	for d := range plain {
		if d < 3 {
			require.Less(t, remat[d].PeakBytes, plain[d].PeakBytes, "device %d", d)
		} else {
			require.Greater(t, remat[d].PeakBytes, plain[d].PeakBytes, "device %d", d)
		}
		require.Equal(t, plain[d].BytesSent, remat[d].BytesSent, "device %d", d)
		require.Equal(t, computes(plainProgs[d], program.BlockForward), computes(rematProgs[d], program.BlockForward), "device %d", d)
		require.Greater(t, computes(rematProgs[d], program.BlockBackward), computes(plainProgs[d], program.BlockBackward), "device %d", d)
	}
}

// A recomputed plan computes bit for bit what the plain one does: the recomputed ops run
// the same kernels, and the same collectives, on the same operands in the same layouts.
func TestRecomputeIsBitIdentical(t *testing.T) {
	fwd := gpt(t)
	batch, err := passes.BatchSize(fwd)
	require.NoError(t, err)
	mb, err := passes.Rebatch(fwd, batch/2)
	require.NoError(t, err)
	step, err := passes.TrainingStep(mb, sgd)
	require.NoError(t, err)
	full, err := passes.TrainingStep(fwd, sgd)
	require.NoError(t, err)
	data := runtime.Data{}
	for k, v := range interp.InitParams(full, 1) {
		data[k] = v
	}
	for k, v := range interp.RandomInputs(full, 2) {
		data[k] = v
	}
	plan := pipeline([][2]int{{2, 1}, {1, 2}}, 2, program.OneFOneB, megatron, propagate)
	run := func(plan func(testing.TB, *ir.Graph) *codegen.Plan) map[string]*kernels.Tensor {
		progs, err := codegen.Lower(plan(t, step))
		require.NoError(t, err)
		got, err := runtime.Run(context.Background(), progs, data, runtime.Options{})
		require.NoError(t, err)
		return got.Stores
	}
	plain, remat := run(plan), run(recomputed(plan))
	require.Greater(t, len(plain), 10, "the loss, gradients and updates")
	require.Equal(t, len(plain), len(remat))
	for name, want := range plain {
		require.Equal(t, want.Float64s(), remat[name].Float64s(), name)
	}
}

// bySegments is recomputed with every forward op of every stage in a segment of its own
// layer (the "l<k>." of its name; others in segment −1), or, with rng, in a random one of
// three: any numbering is valid, only memory and time depend on it.
func bySegments(plan func(t testing.TB, step *ir.Graph) *codegen.Plan, rng *rand.Rand) func(t testing.TB, step *ir.Graph) *codegen.Plan {
	return func(t testing.TB, step *ir.Graph) *codegen.Plan {
		p := recomputed(plan)(t, step)
		for i := range p.Stages {
			p.Stages[i].Segment = map[ir.ValueID]int{}
		}
		for id := range step.Values {
			s := -1
			if rng != nil {
				s = rng.Intn(3)
			} else if _, err := fmt.Sscanf(step.Values[id].Name, "l%d.", &s); err != nil {
				s = -1
			}
			p.Stages[p.StageOf[id]].Segment[ir.ValueID(id)] = s
		}
		return p
	}
}

// Recomputing segment by segment equals the serial step too, whatever the segments.
func TestEquivRecomputeSegments(t *testing.T) {
	two := [][2]int{{1, 1}, {1, 1}}
	rng := rand.New(rand.NewSource(5))
	cases := []equivCase{
		{name: "mlp-layers-1x2", fwd: mlp(3), opt: sgd, b: 2, plan: bySegments(singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate), nil)},
		{name: "mlp-random-2-stage-gpipe", fwd: mlp(3), opt: adam, b: 4, plan: bySegments(pipeline(two, 4, program.GPipe, dataParallel(0), propagate), rng)},
		{name: "gpt-layers-2x2", fwd: gpt2, opt: sgd, b: 2, plan: bySegments(singleStage(2, 2, 2, megatron, propagate), nil)},
		{name: "gpt-random-2-stage-1f1b", fwd: gpt2, opt: sgd, b: 2, plan: bySegments(pipeline([][2]int{{1, 2}, {1, 2}}, 2, program.OneFOneB, dataParallel(mesh.Axis1), propagate), rng)},
		{name: "gpt-random-strategies", fwd: gpt2, opt: sgd, b: 1, plan: bySegments(singleStage(2, 2, 1, randomLeaves(rng), randomChooser(rng)), rng)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}

// gpt2 is the tiny f64 GPT with two layers.
func gpt2(t testing.TB) *ir.Graph {
	m := zoo.NewGPT()
	m.DType, m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = "f64", 2, 16, 2, 8, 16, 4
	g, err := m.Build()
	require.NoError(t, err)
	return g
}

// Segments hold less than one: a single-stage GPipe GPT of 4 layers with 8 micro-batches
// holds, recomputing layer by layer, the layers' inputs and one layer's activations,
// against one micro-batch's whole activations recomputing the stage at once.
func TestRecomputeSegmentsHoldLess(t *testing.T) {
	fwd := func(t testing.TB) *ir.Graph {
		m := zoo.NewGPT()
		m.DType, m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = "f64", 4, 16, 2, 8, 16, 8
		g, err := m.Build()
		require.NoError(t, err)
		return g
	}(t)
	batch, err := passes.BatchSize(fwd)
	require.NoError(t, err)
	mb, err := passes.Rebatch(fwd, batch/8)
	require.NoError(t, err)
	step, err := passes.TrainingStep(mb, sgd)
	require.NoError(t, err)
	peak := func(plan func(testing.TB, *ir.Graph) *codegen.Plan) int64 {
		p := plan(t, step)
		progs, err := codegen.Lower(p)
		require.NoError(t, err)
		return codegen.Predict(p, progs)[0].PeakBytes
	}
	base := singleStage(1, 1, 8, dataParallel(mesh.AxesNone), propagate)
	plain, whole, layers := peak(base), peak(recomputed(base)), peak(bySegments(base, nil))
	t.Logf("peak bytes: plain %d, recomputing the stage %d, layer by layer %d", plain, whole, layers)
	require.Less(t, whole, plain)
	require.Less(t, layers, whole)
}
