package passes

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

const mlpSrc = `param w1: f32[4,8]
param w2: f32[8,3]
input x: f32[5,4] batch=0
input y: i32[5] batch=0 limit=3
h = matmul x, w1
r = relu h
z = matmul r, w2
ce = sparse_cross_entropy z, y
loss = reduce_mean ce axes=[0]
output loss
`

// The autodiff and optimizer phases of the compiler's table, one after the other, are
// TrainingStep.
func TestAutodiffThenOptimizerIsTrainingStep(t *testing.T) {
	g := parse(t, mlpSrc)
	before := g.String()
	opt := Optimizer{Kind: "adam", LR: 1e-3}

	ad, err := Autodiff(g, 0)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(ad))
	require.Len(t, ad.Outputs, 3, "the loss, then grad.w1 and grad.w2")
	assert.Equal(t, "grad.w1", ad.Value(ad.Outputs[1].Value).Name)
	assert.Equal(t, "grad.w2", ad.Value(ad.Outputs[2].Value).Name)
	assert.Empty(t, ad.Updates)

	full, err := ApplyOptimizer(ad, opt)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(full))
	step, err := TrainingStep(g, opt)
	require.NoError(t, err)
	assert.Equal(t, step.String(), full.String(), "autodiff+optimizer is TrainingStep")
	assert.Equal(t, before, g.String(), "the phases leave their input alone")
	assert.Len(t, ad.Outputs, 3, "ApplyOptimizer leaves its input alone")
}

func TestAutodiffAndOptimizerErrors(t *testing.T) {
	bad := parse(t, `param w: f32[4]
z = constant value=0.0 type=f32[]
m = gt w, z
f = cast m to=f32
loss = reduce_sum f axes=[0]
output loss
`)
	_, err := Autodiff(bad, 0)
	require.Error(t, err)
	assert.Equal(t, "model.ir:3:5: grad: gt is not differentiable (used at model.ir:4:5 on the path from w to loss)\n\tmodel.ir:4:5: note: f = cast uses m, of type bool[4], here", err.Error())
	var ie *ir.Error
	assert.True(t, errors.As(err, &ie), "the error is positioned")

	ad, err := Autodiff(parse(t, mlpSrc), 0)
	require.NoError(t, err)
	_, err = ApplyOptimizer(ad, Optimizer{})
	require.Error(t, err)
	assert.Equal(t, `unknown optimizer "", want sgd or adam`, err.Error())

	_, err = ApplyOptimizer(parse(t, mlpSrc), Optimizer{Kind: "sgd", LR: 0.1})
	require.Error(t, err)
	assert.Equal(t, "graph  has no gradient outputs to apply: run autodiff first", err.Error())
}
