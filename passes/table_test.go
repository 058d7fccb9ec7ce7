package passes

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

func TestTableOrder(t *testing.T) {
	require.NoError(t, checkTable(Table))
	names := Names()
	require.GreaterOrEqual(t, len(names), 3)
	assert.Equal(t, []string{"verify", "precision", "autodiff", "optimizer"}, names[:4])
	p, ok := Lookup("optimizer")
	require.True(t, ok)
	assert.Equal(t, []string{"autodiff"}, p.Requires)
	_, ok = Lookup("nope")
	assert.False(t, ok)
}

func TestCheckTableRejectsBadOrders(t *testing.T) {
	run := func(g *ir.Graph, _ *Config) (*ir.Graph, error) { return g, nil }
	for _, tc := range []struct {
		table []Pass
		want  string
	}{
		{[]Pass{{Name: "a", Run: run}, {Name: "a", Run: run}}, "pass a is listed twice"},
		{[]Pass{{Name: "b", Run: run, Requires: []string{"a"}}, {Name: "a", Run: run}}, "pass b requires a, which does not come before it"},
		{[]Pass{{Name: "a"}}, `pass "a" has no name or no function`},
	} {
		err := checkTable(tc.table)
		require.Error(t, err)
		assert.Equal(t, tc.want, err.Error())
	}
}

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

func TestRunUpTo(t *testing.T) {
	g := parse(t, mlpSrc)
	before := g.String()
	cfg := &Config{Optimizer: Optimizer{Kind: "adam", LR: 1e-3}, Check: true}

	ad, err := Run(g, cfg, "autodiff")
	require.NoError(t, err)
	require.Len(t, ad.Outputs, 3, "the loss, then grad.w1 and grad.w2")
	assert.Equal(t, "grad.w1", ad.Value(ad.Outputs[1].Value).Name)
	assert.Equal(t, "grad.w2", ad.Value(ad.Outputs[2].Value).Name)
	assert.Empty(t, ad.Updates)

	full, err := Run(g, cfg, "optimizer")
	require.NoError(t, err)
	step, err := TrainingStep(g, cfg.Optimizer)
	require.NoError(t, err)
	assert.Equal(t, step.String(), full.String(), "the table's autodiff+optimizer is TrainingStep")
	assert.Equal(t, before, g.String(), "Run leaves its input alone")

	_, err = Run(g, cfg, "autodif")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown pass "autodif", want one of verify, precision, autodiff, optimizer`)
}

func TestRunErrorsNameThePass(t *testing.T) {
	bad := parse(t, `param w: f32[4]
z = constant value=0.0 type=f32[]
m = gt w, z
f = cast m to=f32
loss = reduce_sum f axes=[0]
output loss
`)
	_, err := Run(bad, &Config{Optimizer: Optimizer{Kind: "sgd", LR: 0.1}}, "")
	require.Error(t, err)
	assert.Equal(t, "model.ir:3:5: autodiff: grad: gt is not differentiable (used at model.ir:4:5 on the path from w to loss)\n\tmodel.ir:4:5: note: f = cast uses m, of type bool[4], here", err.Error())
	var pe *Error
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "autodiff", pe.Pass)
	var ie *ir.Error
	assert.True(t, errors.As(err, &ie), "the positioned cause is still reachable")

	_, err = Run(parse(t, mlpSrc), &Config{}, "")
	require.Error(t, err)
	assert.Equal(t, `optimizer: unknown optimizer "", want sgd or adam`, err.Error())

	_, err = runOptimizer(parse(t, mlpSrc), &Config{Optimizer: Optimizer{Kind: "sgd", LR: 0.1}})
	require.Error(t, err)
	assert.Equal(t, "graph  has no gradient outputs to apply: run autodiff first", err.Error())
}

func TestRunChecksBetweenPasses(t *testing.T) {
	var seen []string
	broken := func(g *ir.Graph, _ *Config) (*ir.Graph, error) {
		g = g.Clone()
		g.Values[len(g.Values)-1].Type.Shape = ir.Shape{7}
		return g, nil
	}
	table := []Pass{Table[0], {Name: "breaks", Run: broken}}
	cfg := &Config{Check: true, AfterPass: func(p string, g *ir.Graph, took time.Duration) {
		seen = append(seen, fmt.Sprintf("%s:%d", p, len(g.Values)))
	}}
	_, err := runTable(table, parse(t, mlpSrc), cfg, "")
	require.Error(t, err)
	assert.Equal(t, "breaks: left an invalid graph: model.ir:9:8: loss: type is f32[7] but reduce_mean gives f32[]", err.Error())
	assert.Equal(t, []string{"verify:9"}, seen, "AfterPass sees each pass that succeeded")

	cfg.Check = false
	_, err = runTable(table, parse(t, mlpSrc), cfg, "")
	require.NoError(t, err, "without Check nothing verifies between passes")
}
