package passes

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/internal/golden"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// gradValues runs Grad of the graph in src with respect to the named values on feeds and
// returns the gradients.
func gradValues(t *testing.T, src string, feeds interp.Feeds, wrt ...string) [][]float64 {
	t.Helper()
	g := parse(t, src)
	out, grads, err := gradOf(t, g, wrt...)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(out))
	r, err := interp.Run(context.Background(), withOutputs(out, grads), feeds)
	require.NoError(t, err)
	vals := make([][]float64, len(grads))
	for i := range grads {
		vals[i] = r.Outputs[1+i].Float64s()
	}
	return vals
}

func f64s(xs ...float64) *kernels.Tensor {
	return kernels.FromF64(ir.F64, ir.Shape{len(xs)}, xs)
}

// At kinks the tie rules decide; these pin them down.
func TestGradTieRules(t *testing.T) {
	// max: a tie sends the whole gradient to the first operand.
	got := gradValues(t, "param a: f64[3]\nparam b: f64[3]\nm = max a, b\nl = reduce_sum m axes=[0]\noutput l\n",
		interp.Feeds{"a": f64s(1, 2, 3), "b": f64s(1, 5, 0)}, "a", "b")
	assert.Equal(t, []float64{1, 0, 1}, got[0])
	assert.Equal(t, []float64{0, 1, 0}, got[1])

	// reduce_max: tied maxima share the gradient equally.
	got = gradValues(t, "param x: f64[4]\nm = reduce_max x axes=[0]\noutput m\n",
		interp.Feeds{"x": f64s(2, 7, 7, 1)}, "x")
	assert.Equal(t, []float64{0, 0.5, 0.5, 0}, got[0])

	// relu: no gradient at 0.
	got = gradValues(t, "param x: f64[3]\nr = relu x\nl = reduce_sum r axes=[0]\noutput l\n",
		interp.Feeds{"x": f64s(-1, 0, 2)}, "x")
	assert.Equal(t, []float64{0, 0, 1}, got[0])

	// gelu at exactly 0: Φ(0) = 1/2, where y/x would be 0/0.
	got = gradValues(t, "param x: f64[1]\nr = gelu x\nl = reduce_sum r axes=[0]\noutput l\n",
		interp.Feeds{"x": f64s(0)}, "x")
	assert.Equal(t, []float64{0.5}, got[0])
}

func TestGradEdgeCases(t *testing.T) {
	x := f64s(1, -2, 3)
	// A non-scalar loss is differentiated as the sum of its elements.
	got := gradValues(t, "param w: f64[3]\ninput x: f64[3]\nl = mul w, x\noutput l\n",
		interp.Feeds{"w": f64s(4, 5, 6), "x": x}, "w")
	assert.Equal(t, []float64{1, -2, 3}, got[0])

	// With respect to an intermediate value, and to the loss itself.
	src := "param w: f64[3]\ninput x: f64[3]\nh = mul w, x\ne = mul h, h\nl = reduce_sum e axes=[0]\noutput l\n"
	got = gradValues(t, src, interp.Feeds{"w": f64s(1, 1, 1), "x": x}, "h", "w", "l")
	assert.Equal(t, []float64{2, -4, 6}, got[0], "d l / d h = 2h")
	assert.Equal(t, []float64{2, 8, 18}, got[1], "d l / d w = 2h·x")
	assert.Equal(t, []float64{1}, got[2])
}

// The training step of the tiny MLP, printed: review the backward and the update as a diff.
// UPDATE_GOLDEN=1 rewrites it.
func TestTrainingStepGolden(t *testing.T) {
	for _, opt := range []Optimizer{{Kind: "sgd", LR: 0.1, Momentum: 0.9}, {Kind: "adam", LR: 1e-3, WeightDecay: 0.01}} {
		step, err := TrainingStep(model(t, "mlp-tiny"), opt)
		require.NoError(t, err)
		golden.Check(t, "mlp-tiny."+opt.Kind+".step.ir", step.String())
	}
}
