package passes

import (
	"bytes"
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
)

// stepBytesPerParam is what a training step holds for the whole step per param element:
// each param and its gradient accumulator (the param's bytes twice, as the oracle counts)
// and the optimizer state, less the scalar step counter.
func stepBytesPerParam(t *testing.T, step *ir.Graph) float64 {
	var params, bytes int64
	for i := range step.Values {
		v := &step.Values[i]
		switch {
		case v.Op == ir.OpParam:
			params += v.Type.Shape.NumElements()
			bytes += 2 * v.Type.Bytes()
		case v.Op == ir.OpState && v.Type.Shape.Rank() > 0:
			bytes += v.Type.Bytes()
		}
	}
	require.Positive(t, params)
	return float64(bytes) / float64(params)
}

// The weights memory of a step follows its precision as published: mixed-precision Adam
// holds 16 bytes per param (ZeRO, §3.1: 2 + 2 for the f16/bf16 param and gradient, 12 for
// the f32 master, momentum and variance), pure bf16 12, f32 16; SGD with momentum under
// mixed precision 12.
func TestPrecisionBytesPerParam(t *testing.T) {
	adam := Optimizer{Kind: "adam", LR: 1e-3}
	sgd := Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	for _, tc := range []struct {
		precision string
		opt       Optimizer
		want      float64
	}{
		{"", adam, 16}, {"f32", adam, 16}, {"bf16", adam, 12}, {"f16", adam, 12},
		{"mixed", adam, 16}, {"mixed-f16", adam, 16}, {"mixed", sgd, 12}, {"bf16", sgd, 8},
	} {
		tc.opt.Precision = tc.precision
		step, err := TrainingStep(model(t, "mlp-tiny"), tc.opt)
		require.NoError(t, err, tc.precision)
		require.NoError(t, ir.Verify(step))
		assert.Equal(t, tc.want, stepBytesPerParam(t, step), "%s %s", tc.precision, tc.opt.Kind)
	}
}

// ConvertPrecision changes the params and the compute, not the interface: inputs are fed
// and the loss returned in the model's dtypes, and the converted graph prints and parses
// back to itself.
func TestConvertPrecisionKeepsInterface(t *testing.T) {
	g := model(t, "gpt-tiny")
	c, err := ConvertPrecision(g, ir.BF16)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(c))
	for _, id := range g.Leaves(ir.OpInput) {
		cid, ok := c.Lookup(g.Value(id).Name)
		require.True(t, ok)
		assert.Equal(t, g.Value(id).Type, c.Value(cid).Type, "input %s", g.Value(id).Name)
	}
	for _, id := range c.Leaves(ir.OpParam) {
		if c.Value(id).Type.DType.IsFloat() {
			assert.Equal(t, ir.BF16, c.Value(id).Type.DType, c.Value(id).Name)
		}
	}
	loss := c.Value(c.Outputs[0].Value)
	assert.Equal(t, g.Value(g.Outputs[0].Value).Type, loss.Type)
	assert.Equal(t, ir.OpCast, loss.Op)
	assert.Equal(t, ir.BF16, c.Value(loss.Args[0]).Type.DType, "the loss is computed in bf16")
	var buf bytes.Buffer
	require.NoError(t, ir.Print(&buf, c))
	back, err := frontend.Parse("converted.ir", buf.Bytes())
	require.NoError(t, err)
	assert.Equal(t, len(c.Values), len(back.Values))

	_, err = ParsePrecision("fp8")
	require.EqualError(t, err, `unknown precision "fp8", want one of [f32 f16 bf16 mixed mixed-f16]`)
	_, err = TrainingStep(g, Optimizer{Kind: "sgd", LR: 0.1, Precision: "half"})
	require.ErrorContains(t, err, `unknown precision "half"`)
}

// The master weight is exact: after every step f32(p) + <p>.rem is the f32 result of the
// update bit for bit, and updates far below bf16's resolution accumulate in the master
// while pure bf16 training loses them (its params never move).
func TestMixedPrecisionMasterWeights(t *testing.T) {
	g := model(t, "mlp-tiny")
	run := func(precision string, steps int) (*ir.Graph, interp.Feeds) {
		step, err := TrainingStep(g, Optimizer{Kind: "sgd", LR: 1e-5, Precision: precision})
		require.NoError(t, err)
		feeds := interp.InitParams(step, 1)
		in, err := interp.GenerateInputs(step, 2)
		require.NoError(t, err)
		for k, v := range in {
			feeds[k] = v
		}
		for range steps {
			r, err := interp.RunKeep(context.Background(), step, feeds)
			require.NoError(t, err)
			if precision == "mixed" {
				for _, p := range step.Leaves(ir.OpParam) {
					name := step.Value(p).Name
					master, ok := step.Lookup(name + ".master.next")
					require.True(t, ok)
					want, next, rem := r.Values[master], r.Updates[name], r.Updates[name+".rem"]
					for i := range want.Len() {
						require.Equal(t, float32(want.At(i)), float32(next.At(i))+float32(rem.At(i)), "%s[%d]", name, i)
					}
				}
			}
			feeds.Apply(r)
		}
		return step, feeds
	}
	// moved counts the param elements whose weight — the master f32(p) + <p>.rem where
	// there is one — left its initial value.
	moved := func(step *ir.Graph, f interp.Feeds) (n, total int) {
		init := interp.InitParams(step, 1)
		for _, p := range step.Leaves(ir.OpParam) {
			name := step.Value(p).Name
			for i := range init[name].Len() {
				w := float32(f[name].At(i))
				if rem := f[name+".rem"]; rem != nil {
					w += float32(rem.At(i))
				}
				if float32(init[name].At(i)) != w {
					n++
				}
				total++
			}
		}
		return n, total
	}
	pureStep, pure := run("bf16", 5)
	mixedStep, mixed := run("mixed", 5)
	np, total := moved(pureStep, pure)
	nm, _ := moved(mixedStep, mixed)
	t.Logf("of %d weights, %d moved in pure bf16, %d under mixed precision", total, np, nm)
	assert.Greater(t, nm, 9*total/10, "the masters hold the updates (those of a zero gradient aside)")
	assert.Less(t, np, total/4, "pure bf16 loses most updates of lr 1e-5")
}

// MasterRemainders finds the remainder state of every half param of a mixed step, and none
// elsewhere.
func TestMasterRemainders(t *testing.T) {
	g := model(t, "mlp-tiny")
	for _, precision := range []string{"", "bf16", "mixed"} {
		step, err := TrainingStep(g, Optimizer{Kind: "adam", LR: 0.01, Precision: precision})
		require.NoError(t, err)
		got := map[string]string{}
		for s, p := range MasterRemainders(step) {
			got[step.Value(s).Name] = step.Value(p).Name
		}
		want := map[string]string{}
		if precision == "mixed" {
			for _, p := range step.Leaves(ir.OpParam) {
				want[step.Value(p).Name+".rem"] = step.Value(p).Name
			}
		}
		assert.Equal(t, want, got, "precision %q", precision)
	}
}

// A static loss scale keeps small f16 gradients from flushing to zero: with a loss of
// 2⁻²³ (an exact f16) of the cross-entropy, f16 gradients of order 1e-8 are below f16's
// smallest subnormal, so mixed-f16 without a scale loses most of them; scaled by 2¹⁴ they
// survive, S times the f32 step's, and the update unscales them in f32.
func TestLossScale(t *testing.T) {
	g := parse(t, `param w1: f32[4,8]
param w2: f32[8,3]
input x: f32[6,4] batch=0
input y: i32[6] batch=0 limit=3
h = matmul x, w1
r = tanh h
z = matmul r, w2
ce = sparse_cross_entropy z, y
m = reduce_mean ce axes=[0]
k = constant type=f32[] value=1.1920928955078125e-07
loss = mul m, k
output loss
`)
	grads := func(opt Optimizer) (map[string][]float64, *ir.Graph) {
		step, err := TrainingStep(g, opt)
		require.NoError(t, err)
		feeds := interp.InitParams(step, 1)
		in, err := interp.GenerateInputs(step, 2)
		require.NoError(t, err)
		for k, v := range in {
			feeds[k] = v
		}
		r, err := interp.RunKeep(context.Background(), step, feeds)
		require.NoError(t, err)
		out := map[string][]float64{}
		for _, p := range step.Leaves(ir.OpParam) {
			name := step.Value(p).Name
			id, ok := step.Lookup("grad." + name)
			require.True(t, ok)
			for i := range r.Values[id].Len() {
				out[name] = append(out[name], r.Values[id].At(i))
			}
		}
		return out, step
	}
	zeros := func(gs map[string][]float64) (n int) {
		for _, g := range gs {
			for _, v := range g {
				if v == 0 {
					n++
				}
			}
		}
		return n
	}
	sgd := Optimizer{Kind: "sgd", LR: 1e4}
	ref, _ := grads(sgd)
	require.Zero(t, zeros(ref), "f32 gradients are all nonzero")
	unscaled, _ := grads(Optimizer{Kind: "sgd", LR: 1e4, Precision: "mixed-f16"})
	assert.Greater(t, zeros(unscaled), 28, "of 56 f16 gradients most flush to zero")
	scaledOpt := Optimizer{Kind: "sgd", LR: 1e4, Precision: "mixed-f16", LossScale: 1 << 14}
	scaled, step := grads(scaledOpt)
	assert.Zero(t, zeros(scaled), "scaled, none does")
	for name, want := range ref {
		var diff, scale float64
		for i, w := range want {
			diff = max(diff, math.Abs(w*(1<<14)-scaled[name][i]))
			scale = max(scale, math.Abs(w*(1<<14)))
		}
		assert.Less(t, diff/scale, 2e-2, "%s: the gradients are the scaled ones, to f16's resolution", name)
	}
	_, ok := step.Lookup("w1.grad.unscaled")
	assert.True(t, ok, "the update unscales in f32")
	_, err := TrainingStep(g, Optimizer{Kind: "sgd", LR: 1, LossScale: -1})
	require.ErrorContains(t, err, "the loss scale must be positive")
}

// Under a half compute dtype batch_norm stays in f32 between casts, as cuDNN runs it: its
// gradient's differences would cancel to nothing in bf16.
func TestConvertPrecisionKeepsBatchNormF32(t *testing.T) {
	c, err := ConvertPrecision(model(t, "wresnet-tiny"), ir.BF16)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(c))
	n := 0
	for i := range c.Values {
		v := &c.Values[i]
		if v.Op != ir.OpBatchNorm {
			continue
		}
		n++
		assert.Equal(t, ir.F32, v.Type.DType, v.Name)
		for _, a := range v.Args {
			assert.Equal(t, ir.F32, c.Value(a).Type.DType, "%s's operand %s", v.Name, c.Value(a).Name)
		}
	}
	require.Positive(t, n)
	id, ok := c.Lookup("stem.bn.batch_norm")
	require.True(t, ok)
	assert.Equal(t, ir.OpCast, c.Value(id).Op, "the model's value is the bf16 cast of the f32 op")
	assert.Equal(t, ir.BF16, c.Value(id).Type.DType)
}
