package codegen_test

import (
	"context"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
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
