package autopar

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
)

// paramElements counts the elements of the params of g.
func paramElements(g *ir.Graph) int64 {
	var n int64
	for _, p := range g.Leaves(ir.OpParam) {
		n += g.Value(p).Type.Shape.NumElements()
	}
	return n
}

// The weights memory the oracle prices follows the precision of the step: per Adam param,
// mixed precision holds 16 bytes (ZeRO's count: a bf16 param and gradient, 2 + 2, and the
// f32 master, momentum and variance, 12), pure bf16 12 and f32 16, plus Adam's 4-byte step
// counter; the plan's memory breakdown splits them into weights, gradients and optimizer.
func TestPrecisionWeightBytes(t *testing.T) {
	g := model(t, "mlp-tiny")
	params := paramElements(g)
	adam := passes.Optimizer{Kind: "adam", LR: 0.01}
	for _, tc := range []struct {
		precision                  string
		weights, grads, opt, total int64 // bytes per param
	}{
		{"", 4, 4, 8, 16},
		{"bf16", 2, 2, 8, 12},
		{"mixed", 2, 2, 12, 16},
	} {
		t.Run("precision="+tc.precision, func(t *testing.T) {
			p := compile(t, g, cluster(t, "cpu:1"), Options{Microbatches: 1, Optimizer: adam, Precision: tc.precision})
			require.Len(t, p.Stages, 1)
			assert.Equal(t, tc.total*params+4, p.Stages[0].WeightBytes)
			for _, m := range p.MemoryBreakdown() {
				assert.Equal(t, tc.weights*params, m.Weights)
				assert.Equal(t, tc.grads*params, m.Gradients)
				assert.Equal(t, tc.opt*params+4, m.Optimizer)
			}
			assert.Equal(t, tc.precision, p.Optimizer.Precision, "plan.json records the precision")
			var a, b bytes.Buffer
			require.NoError(t, p.WriteJSON(&a))
			q, err := ReadPlan(bytes.NewReader(a.Bytes()))
			require.NoError(t, err)
			require.NoError(t, q.WriteJSON(&b))
			assert.Equal(t, a.String(), b.String(), "plan.json round-trips, its step rebuilt in its precision")
		})
	}
	_, err := Compile(t.Context(), g, cluster(t, "cpu:2"), Options{Precision: "fp8"})
	require.EqualError(t, err, `compile: unknown precision "fp8", want one of [f32 f16 bf16 mixed mixed-f16]`)
}

// The compiler's own mixed-precision plans — data-parallel, tensor-parallel and pipelined
// GPTs — run on the runtime equal the serial step in the same precision (the Trainer's
// CheckSerial, every step from the same params: loss, params with their master weights,
// optimizer state), to bf16's resolution: a parallel sum rounds its partial sums to bf16
// where the serial rounds once (an ulp is 2⁻⁸ ≈ 0.4%). codegen's TestEquivMixedPrecision
// holds forced plans of the MLP and the GPT to the same, tensor by tensor. (The MLP is left
// to it: the ILP may split a contraction ahead of a relu, where a pre-activation an ulp from
// zero flips the kink and moves a gradient by a sample's share.)
func TestMixedPrecisionPlansEqualSerial(t *testing.T) {
	sgd := passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	adam := passes.Optimizer{Kind: "adam", LR: 0.01, Eps: 1e-3} // eps above bf16's gradient noise
	cases := []struct {
		name, model, cluster string
		opts                 Options
	}{
		{"gpt-dp", "gpt-tiny", "cpu:2", Options{Microbatches: 1, Layers: 2, Optimizer: adam, Manual: &Manual{TP: 1, PP: 1, DP: 2}}},
		{"gpt-tp", "gpt-tiny", "cpu:2", Options{Microbatches: 1, Layers: 2, Optimizer: sgd, Manual: &Manual{TP: 2, PP: 1, DP: 1}}},
		{"gpt-dp-pp", "gpt-tiny", "cpu:4", Options{Microbatches: 2, Layers: 2, Optimizer: sgd, Manual: &Manual{TP: 1, PP: 2, DP: 2}}},
	}
	ctx := t.Context()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Precision = "mixed"
			g := model(t, tc.model)
			p := compile(t, g, cluster(t, tc.cluster), tc.opts)
			require.Equal(t, ir.BF16, p.Step().Value(p.Step().Leaves(ir.OpParam)[0]).Type.DType)
			tr, err := NewTrainer(ctx, p, TrainerOptions{Seed: 1, CheckSerial: true, Tolerance: 2e-2})
			require.NoError(t, err)
			for step := 1; step <= 3; step++ {
				_, err := tr.Step(ctx, stepBatch(t, g, step))
				require.NoError(t, err, "step %d", step)
				c := tr.LastCheck()
				require.Less(t, c.Grads.Rel(), 2e-2, "step %d gradients (%s)", step, c.Grads.Worst)
				t.Logf("step %d: loss %.2g, grads %.2g (%s), updates %.2g (%s)", step, c.Loss.Rel(), c.Grads.Rel(), c.Grads.Worst, c.Updates.Rel(), c.Updates.Worst)
			}
		})
	}
}
