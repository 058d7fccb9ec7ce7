package passes

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

func model(t testing.TB, name string) *ir.Graph {
	t.Helper()
	g, err := frontend.ParseFile(filepath.Join("..", "testdata", "models", name+".ir"))
	require.NoError(t, err)
	return g
}

// train runs steps training steps of step on one fixed batch and returns the losses.
func train(t *testing.T, step *ir.Graph, steps int) []float64 {
	feeds := interp.InitParams(step, 1)
	inputs, err := interp.GenerateInputs(step, 2)
	require.NoError(t, err)
	for k, v := range inputs {
		feeds[k] = v
	}
	losses := make([]float64, steps)
	for i := range losses {
		r, err := interp.Run(context.Background(), step, feeds)
		require.NoError(t, err)
		losses[i] = r.Outputs[0].At(0)
		feeds.Apply(r)
	}
	return losses
}

func TestTrainingStepLossFalls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		model string
		opt   Optimizer
	}{
		{"sgd", "mlp-tiny", Optimizer{Kind: "sgd", LR: 0.1}},
		{"sgd_momentum", "mlp-tiny", Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9}},
		{"adam", "mlp-tiny", Optimizer{Kind: "adam", LR: 0.01}},
		{"adamw", "mlp-tiny", Optimizer{Kind: "adam", LR: 0.01, WeightDecay: 0.01}},
		{"adam_gpt", "gpt-tiny", Optimizer{Kind: "adam", LR: 0.005}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step, err := TrainingStep(model(t, tc.model), tc.opt)
			require.NoError(t, err)
			require.NoError(t, ir.Verify(step))
			losses := train(t, step, 20)
			t.Logf("loss %.4f -> %.4f", losses[0], losses[19])
			for _, l := range losses {
				require.False(t, math.IsNaN(l) || math.IsInf(l, 0), "losses %v", losses)
			}
			assert.Less(t, losses[19], 0.7*losses[0], "losses %v", losses)
		})
	}
}

// oneParam is loss = Σ w·x: its gradient is x whatever w is, which makes the optimizer's
// arithmetic easy to follow by hand.
func oneParam(t *testing.T) (*ir.Graph, interp.Feeds, []float64, []float64) {
	g := parse(t, "param w: f64[3]\ninput x: f64[3]\np = mul w, x\nloss = reduce_sum p axes=[0]\noutput loss\n")
	w, x := []float64{0.5, -1, 2}, []float64{0.3, -2, 0.01}
	feeds := interp.Feeds{"w": kernels.FromF64(ir.F64, ir.Shape{3}, w), "x": kernels.FromF64(ir.F64, ir.Shape{3}, x)}
	return g, feeds, w, x
}

func stepOnce(t *testing.T, step *ir.Graph, feeds interp.Feeds) {
	r, err := interp.Run(context.Background(), step, feeds)
	require.NoError(t, err)
	feeds.Apply(r)
}

func TestAdamMatchesHandComputation(t *testing.T) {
	g, feeds, w, x := oneParam(t)
	opt := Optimizer{Kind: "adam", LR: 0.1, Beta1: 0.8, Beta2: 0.99, Eps: 1e-3, WeightDecay: 0.05}
	step, err := TrainingStep(g, opt)
	require.NoError(t, err)
	for k, v := range interp.InitParams(step, 0) {
		if _, fed := feeds[k]; !fed {
			feeds[k] = v // the state: m, v, adam.t at zero
		}
	}
	m, v := make([]float64, 3), make([]float64, 3)
	for n := 1; n <= 2; n++ {
		stepOnce(t, step, feeds)
		for i := range w {
			m[i] = opt.Beta1*m[i] + (1-opt.Beta1)*x[i]
			v[i] = opt.Beta2*v[i] + (1-opt.Beta2)*x[i]*x[i]
			mhat := m[i] / (1 - math.Pow(opt.Beta1, float64(n)))
			vhat := v[i] / (1 - math.Pow(opt.Beta2, float64(n)))
			w[i] -= opt.LR * (mhat/(math.Sqrt(vhat)+opt.Eps) + opt.WeightDecay*w[i])
		}
		assert.InDeltaSlice(t, w, feeds["w"].Float64s(), 1e-12, "w after step %d", n)
		assert.InDeltaSlice(t, m, feeds["w.m"].Float64s(), 1e-12, "w.m after step %d", n)
		assert.InDeltaSlice(t, v, feeds["w.v"].Float64s(), 1e-12, "w.v after step %d", n)
		assert.Equal(t, float64(n), feeds["adam.t"].At(0))
	}
}

func TestSGDMatchesHandComputation(t *testing.T) {
	for _, mu := range []float64{0, 0.9} {
		g, feeds, w, x := oneParam(t)
		opt := Optimizer{Kind: "sgd", LR: 0.1, Momentum: mu, WeightDecay: 0.01}
		step, err := TrainingStep(g, opt)
		require.NoError(t, err)
		_, hasState := step.Lookup("w.m")
		assert.Equal(t, mu > 0, hasState, "momentum state exists iff momentum > 0")
		assert.Len(t, step.Updates, map[bool]int{false: 1, true: 2}[mu > 0])
		if hasState {
			feeds["w.m"] = kernels.New(ir.Type{DType: ir.F64, Shape: ir.Shape{3}})
		}
		vel := make([]float64, 3)
		for n := 1; n <= 2; n++ {
			stepOnce(t, step, feeds)
			for i := range w {
				vel[i] = mu*vel[i] + x[i] + opt.WeightDecay*w[i]
				w[i] -= opt.LR * vel[i]
			}
			assert.InDeltaSlice(t, w, feeds["w"].Float64s(), 1e-12, "momentum %g, step %d", mu, n)
		}
	}
}

// The step of every tiny zoo model verifies, keeps the loss first, updates every param and
// state once, and prints to text that parses back to the same graph.
func TestTrainingStepPrintsAndParses(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		for _, opt := range []Optimizer{{Kind: "sgd", LR: 0.1, Momentum: 0.9}, {Kind: "adam", LR: 1e-3}} {
			t.Run(name+"_"+opt.Kind, func(t *testing.T) {
				g := model(t, name)
				step, err := TrainingStep(g, opt)
				require.NoError(t, err)
				require.NoError(t, ir.Verify(step))
				assert.Equal(t, g.Outputs[0].Value, step.Outputs[0].Value, "the loss stays the first output")
				updated := map[ir.ValueID]bool{}
				for _, u := range step.Updates {
					updated[u.Target] = true
				}
				for i := range step.Values {
					if op := step.Values[i].Op; op == ir.OpParam || op == ir.OpState {
						assert.True(t, updated[ir.ValueID(i)], "%s has no update", step.Values[i].Name)
					}
				}
				var buf bytes.Buffer
				require.NoError(t, ir.Print(&buf, step))
				back, err := frontend.Parse(name+".step.ir", buf.Bytes())
				require.NoError(t, err)
				assert.Equal(t, buf.String(), back.String())
			})
		}
	}
}

func TestOptimizerErrors(t *testing.T) {
	g, _, _, _ := oneParam(t)
	for _, tc := range []struct {
		opt  Optimizer
		want string
	}{
		{Optimizer{Kind: "rmsprop", LR: 1}, `unknown optimizer "rmsprop", want sgd or adam`},
		{Optimizer{LR: 1}, `unknown optimizer "", want sgd or adam`},
		{Optimizer{Kind: "sgd"}, "optimizer sgd: the learning rate must be positive, got 0"},
		{Optimizer{Kind: "sgd", LR: 0.1, Momentum: 1}, "optimizer sgd: momentum must be in [0, 1), got 1"},
		{Optimizer{Kind: "adam", LR: 0.1, Beta2: 1.5}, "optimizer adam: beta1 and beta2 must be in (0, 1), got 1.5"},
		{Optimizer{Kind: "adam", LR: 0.1, Eps: -1}, "optimizer adam: eps must be positive, got -1"},
		{Optimizer{Kind: "adam", LR: math.NaN()}, "optimizer adam: the learning rate must be positive, got NaN"},
		{Optimizer{Kind: "sgd", LR: 0.1, WeightDecay: -0.1}, "optimizer sgd: weight decay must be >= 0, got -0.1"},
	} {
		_, err := TrainingStep(g, tc.opt)
		require.Error(t, err, "%+v", tc.opt)
		assert.Equal(t, tc.want, err.Error())
	}
}

func TestTrainingStepInputErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"param w: f32[3]\n", "graph  has no output: a training step needs the loss as its first output"},
		{"param w: f32[3]\noutput w\n", "model.ir:2:1: the first output w is the loss and must be a float scalar, is f32[3]"},
		{"input x: f32[3]\nl = reduce_sum x axes=[0]\noutput l\n", "graph  has no params to train"},
		{"param w: f32[]\nn = neg w\noutput w\nupdate w <- n\n", "model.ir:4:1: param w already has an update: the graph is already a training step"},
	} {
		_, err := TrainingStep(parse(t, tc.src), Optimizer{Kind: "sgd", LR: 0.1})
		require.Error(t, err, tc.src)
		assert.Equal(t, tc.want, err.Error())
	}
}

// Half-precision params are updated in f32 (f16 cannot hold Adam's eps): the state is f32,
// the new param is rounded back to f16, and training still makes progress.
func TestTrainingStepHalfPrecision(t *testing.T) {
	g := parse(t, `param w1: f16[4,8]
param w2: f16[8,3]
input x: f16[6,4] batch=0
input y: i32[6] batch=0 limit=3
h = matmul x, w1
r = relu h
z = matmul r, w2
ce = sparse_cross_entropy z, y
loss = reduce_mean ce axes=[0]
output loss
`)
	for _, opt := range []Optimizer{{Kind: "adam", LR: 0.05}, {Kind: "sgd", LR: 0.5, Momentum: 0.5}} {
		step, err := TrainingStep(g, opt)
		require.NoError(t, err)
		require.NoError(t, ir.Verify(step))
		m, ok := step.Lookup("w1.m")
		require.True(t, ok)
		assert.Equal(t, ir.F32, step.Value(m).Type.DType)
		next, ok := step.Lookup("w1.next")
		require.True(t, ok)
		assert.Equal(t, ir.F16, step.Value(next).Type.DType)
		losses := train(t, step, 20)
		assert.Less(t, losses[19], 0.8*losses[0], "%s: losses %v", opt.Kind, losses)
	}
}

// Every model of the zoo, in every size, differentiates and steps to a graph that verifies:
// the rules cover every op and shape the zoo emits (the tiny ones are also trained above).
func TestTrainingStepEveryZooModel(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "models", "*.ir"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".ir")
		t.Run(name, func(t *testing.T) {
			step, err := TrainingStep(model(t, name), Optimizer{Kind: "adam", LR: 1e-4})
			require.NoError(t, err)
			require.NoError(t, ir.Verify(step))
		})
	}
}

// Every value TrainingStep adds says what it is, and of a value of the right kind: the
// gradient and state of a param, the adjoint of a forward value, the updates of the params
// and their state marked as updates.
func TestTrainingStepMarksProvenance(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "gpt-tiny"} {
		for _, opt := range []Optimizer{{Kind: "sgd", LR: 0.1, Momentum: 0.9}, {Kind: "adam", LR: 0.01}} {
			fwd := model(t, name)
			step, err := TrainingStep(fwd, opt)
			require.NoError(t, err)
			n := len(fwd.Values)
			for i := range step.Values {
				v := &step.Values[i]
				if i < n {
					require.Equal(t, ir.Prov{}, v.Prov, "%s is the model's", v.Name)
					continue
				}
				require.NotEqual(t, ir.RoleForward, v.Prov.Role, "%s was made by a pass", v.Name)
				of, ok := v.Prov.OfValue()
				switch v.Prov.Role {
				case ir.RoleGrad:
					require.True(t, ok && step.Value(of).Op == ir.OpParam, "%s", v.Name)
				case ir.RoleAdjoint, ir.RoleAdjointPart, ir.RoleAdjointSum:
					require.True(t, ok && int(of) < n, "%s is the adjoint of a model value", v.Name)
				case ir.RoleState:
					require.True(t, v.Op == ir.OpState && v.Prov.Slot != "", "%s", v.Name)
					require.True(t, !ok || step.Value(of).Op == ir.OpParam, "%s", v.Name)
				}
			}
			grads := step.ByRole(ir.RoleGrad)
			for _, p := range step.Leaves(ir.OpParam) {
				require.NotEqual(t, ir.NoValue, grads[p], "%s has a gradient", step.Value(p).Name)
			}
			for _, u := range step.Updates {
				require.Equal(t, ir.RoleUpdate, step.Value(u.Value).Prov.Role, "%s", step.Value(u.Value).Name)
			}
		}
	}
}
