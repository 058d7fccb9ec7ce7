package codegen_test

import (
	"testing"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
)

// Mixed precision (bf16 compute, f32 master weights and optimizer state) run on the
// runtime equals the serial step in the same precision, data- and tensor-parallel and
// pipelined, to bf16's resolution: a parallel sum rounds its partial sums to bf16 where the
// serial rounds once (an ulp is 2⁻⁸). The plans are forced so that no forward sum is split
// ahead of a relu: there a pre-activation one ulp from zero can flip the kink and move a
// gradient by a whole sample's share, which says nothing about the programs.
func TestEquivMixedPrecision(t *testing.T) {
	mixed := func(o passes.Optimizer) passes.Optimizer { o.Precision = "mixed"; return o }
	// Adam's first steps are ±lr wherever |g| ≫ eps: an eps above bf16's gradient noise
	// keeps a noise-sized gradient's step noise-sized.
	adamBF16 := mixed(passes.Optimizer{Kind: "adam", LR: 0.01, Eps: 1e-3})
	msgd := mixed(sgd)
	twoDP := [][2]int{{1, 2}, {1, 2}}
	const tol = 2e-2
	cases := []equivCase{
		{name: "mlp-dp-1x2", fwd: mlpOf("f32", 2), opt: msgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate), tol: tol, stepwise: true},
		{name: "mlp-dp-2x2-adam-microbatches", fwd: mlpOf("f32", 2), opt: adamBF16, b: 2, plan: singleStage(2, 2, 2, dataParallel(mesh.AxesBoth), propagate), tol: tol, stepwise: true},
		{name: "mlp-megatron-1x2", fwd: mlpOf("f32", 1), opt: msgd, b: 1, plan: singleStage(1, 2, 1, megatron, propagate), tol: tol, stepwise: true},
		{name: "mlp-megatron-2x2-adam-microbatches", fwd: mlpOf("f32", 1), opt: adamBF16, b: 2, plan: singleStage(2, 2, 2, megatron, propagate), tol: tol, stepwise: true},
		{name: "gpt-dp-1x2", fwd: gptOf("f32"), opt: msgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate), tol: tol, stepwise: true},
		{name: "wresnet-dp-sync-batch-norm-1x2", fwd: wresnetOf("f32"), opt: msgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate), tol: tol, stepwise: true},
		{name: "gpt-2-stage-dp-1f1b", fwd: gptOf("f32"), opt: msgd, b: 2, plan: pipeline(twoDP, 2, program.OneFOneB, dataParallel(mesh.Axis1), propagate), tol: tol, stepwise: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}
