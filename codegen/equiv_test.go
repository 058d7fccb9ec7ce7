package codegen_test

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/program"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// The proofs that codegen.Lower is right: a plan's programs, run on the runtime, give the loss,
// gradients and updated params and state of the serial interpreter running the full-batch
// step, for three steps, and the runtime's counters equal codegen.Predict's.

var (
	sgd  = passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	adam = passes.Optimizer{Kind: "adam", LR: 0.01}
)

// mlp is a small f64 MLP of the zoo.
func mlp(layers int) func(t testing.TB) *ir.Graph { return mlpOf("f64", layers) }

func mlpOf(dtype string, layers int) func(t testing.TB) *ir.Graph {
	return func(t testing.TB) *ir.Graph {
		m := zoo.NewMLP()
		m.DType, m.Layers, m.Hidden, m.Batch, m.In, m.Classes = dtype, layers, 16, 16, 8, 8
		g, err := m.Build()
		require.NoError(t, err)
		return g
	}
}

// singleStage plans the whole step on one mesh with the given leaf rule and chooser.
func singleStage(n0, n1, b int, leaf leafRule, choose chooser) func(t testing.TB, step *ir.Graph) *codegen.Plan {
	return func(t testing.TB, step *ir.Graph) *codegen.Plan {
		return buildPlan(step, b, program.GPipe, []*mesh.LogicalMesh{meshAt(t, n0, n1, 0)}, oneStage(step), leaf, choose)
	}
}

func TestEquivDataParallel(t *testing.T) {
	cases := []equivCase{
		{name: "1x1", fwd: mlp(2), opt: sgd, b: 1, plan: singleStage(1, 1, 1, dataParallel(mesh.AxesNone), propagate)},
		{name: "1x2", fwd: mlp(2), opt: sgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "1x4-adam", fwd: mlp(2), opt: adam, b: 1, plan: singleStage(1, 4, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "2x2", fwd: mlp(2), opt: sgd, b: 1, plan: singleStage(2, 2, 1, dataParallel(mesh.AxesBoth), propagate)},
		{name: "1x2-microbatches", fwd: mlp(2), opt: adam, b: 2, plan: singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate)},
		{name: "2x2-f32", fwd: mlpOf("f32", 2), opt: sgd, b: 2, plan: singleStage(2, 2, 2, dataParallel(mesh.AxesBoth), propagate)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}

// megatron splits the first layer's weight by columns and the output layer's by rows on
// mesh axis 1 (their bias and optimizer state follow), and the batch on axis 0.
func megatron(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh) mesh.Spec {
	v := g.Value(id)
	s := dataParallel(mesh.Axis0)(g, id, m)
	name := v.Name
	for _, suffix := range []string{".m", ".v", ".rem"} {
		name = strings.TrimSuffix(name, suffix)
	}
	switch name {
	case "l0.fc.w":
		s.Dims[1] = mesh.Axis1
	case "l0.fc.b", "logits.w":
		s.Dims[0] = mesh.Axis1
	}
	return s
}

func TestEquivMegatron(t *testing.T) {
	cases := []equivCase{
		{name: "1x2-sgd", fwd: mlp(1), opt: sgd, b: 1, plan: singleStage(1, 2, 1, megatron, propagate)},
		{name: "1x4-adam", fwd: mlp(1), opt: adam, b: 1, plan: singleStage(1, 4, 1, megatron, propagate)},
		{name: "2x2-adam-microbatches", fwd: mlp(1), opt: adam, b: 2, plan: singleStage(2, 2, 2, megatron, propagate)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}

// gpt is a tiny f64 GPT of the zoo.
func gpt(t testing.TB) *ir.Graph { return gptOf("f64")(t) }

func gptOf(dtype string) func(t testing.TB) *ir.Graph {
	return func(t testing.TB) *ir.Graph {
		m := zoo.NewGPT()
		m.DType, m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = dtype, 1, 16, 2, 8, 16, 4
		g, err := m.Build()
		require.NoError(t, err)
		return g
	}
}

func TestEquivRandomStrategies(t *testing.T) {
	type model struct {
		name string
		fwd  func(t testing.TB) *ir.Graph
		opt  passes.Optimizer
	}
	// GPT trains with SGD: its key bias has a gradient that vanishes mathematically
	// (softmax cancels it), so the serial and parallel gradients are both rounding noise of
	// 1e-17, and Adam, which divides by the gradient's own magnitude, turns that noise into
	// updates of ±lr whose sign no two summation orders agree on.
	models := []model{{"mlp", mlp(2), adam}, {"gpt", gpt, sgd}}
	shapes := [][2]int{{1, 2}, {2, 2}, {1, 4}}
	var kinds [program.NumKinds]int
	for _, md := range models {
		for si, sh := range shapes {
			for seed := range 2 {
				name := fmt.Sprintf("%s-%dx%d-seed%d", md.name, sh[0], sh[1], seed)
				t.Run(name, func(t *testing.T) {
					rng := rand.New(rand.NewSource(int64(100*si + seed)))
					b := 1 + seed
					progs := runEquiv(t, equivCase{name: name, fwd: md.fwd, opt: md.opt, b: b,
						plan: singleStage(sh[0], sh[1], b, randomLeaves(rng), randomChooser(rng))})
					for _, p := range progs {
						for _, in := range p.Instrs {
							kinds[in.Kind]++
						}
					}
				})
			}
		}
	}
	// The random plans must exercise every collective, or the test proves little.
	for _, k := range []program.Kind{program.AllReduce, program.AllGather, program.ReduceScatter, program.AllToAll} {
		require.Positive(t, kinds[k], "no %s in any random plan", k)
	}
}

func TestEquivPipeline(t *testing.T) {
	two := [][2]int{{1, 1}, {1, 1}}
	twoDP := [][2]int{{1, 2}, {1, 2}}
	four := [][2]int{{1, 1}, {1, 1}, {1, 1}, {1, 1}}
	odd := [][2]int{{1, 2}, {2, 1}}
	rng := rand.New(rand.NewSource(7))
	cases := []equivCase{
		{name: "2-stage-gpipe", fwd: mlp(1), opt: sgd, b: 2, plan: pipeline(two, 2, program.GPipe, dataParallel(0), propagate)},
		{name: "2-stage-1f1b", fwd: mlp(1), opt: adam, b: 4, plan: pipeline(two, 4, program.OneFOneB, dataParallel(0), propagate)},
		{name: "2-stage-dp-1f1b", fwd: mlp(1), opt: sgd, b: 2, plan: pipeline(twoDP, 2, program.OneFOneB, dataParallel(mesh.Axis1), propagate)},
		{name: "4-stage-gpipe", fwd: mlp(3), opt: adam, b: 4, plan: pipeline(four, 4, program.GPipe, dataParallel(0), propagate)},
		{name: "4-stage-1f1b", fwd: mlp(3), opt: sgd, b: 4, plan: pipeline(four, 4, program.OneFOneB, dataParallel(0), propagate)},
		{name: "4-stage-1f1b-16mb", fwd: mlp(3), opt: adam, b: 16, plan: pipeline(four, 16, program.OneFOneB, dataParallel(0), propagate)},
		{name: "4-stage-gpipe-16mb", fwd: mlp(3), opt: sgd, b: 16, plan: pipeline(four, 16, program.GPipe, dataParallel(0), propagate)},
		{name: "2-stage-random-cross-mesh", fwd: mlp(1), opt: adam, b: 2, plan: pipeline(odd, 2, program.OneFOneB, randomLeaves(rng), randomChooser(rng))},
		{name: "2-stage-gpt-1f1b", fwd: gpt, opt: sgd, b: 2, plan: pipeline(twoDP, 2, program.OneFOneB, dataParallel(mesh.Axis1), propagate)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}

// moe and wresnet are the zoo's tiny default configs in f64.
func moe(t testing.TB) *ir.Graph {
	m := zoo.NewMoE()
	m.DType = "f64"
	g, err := m.Build()
	require.NoError(t, err)
	return g
}

func wresnet(t testing.TB) *ir.Graph { return wresnetOf("f64")(t) }

func wresnetOf(dtype string) func(t testing.TB) *ir.Graph {
	return func(t testing.TB) *ir.Graph {
		m := zoo.NewWResNet()
		m.DType = dtype
		g, err := m.Build()
		require.NoError(t, err)
		return g
	}
}

func TestEquivMoEAndWideResNet(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	cases := []equivCase{
		{name: "moe-dp-1x2", fwd: moe, opt: sgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "moe-random-2x2", fwd: moe, opt: sgd, b: 1, plan: singleStage(2, 2, 1, randomLeaves(rng), randomChooser(rng))},
		{name: "wresnet-dp-1x2", fwd: wresnet, opt: sgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "wresnet-random-2x2", fwd: wresnet, opt: sgd, b: 1, plan: singleStage(2, 2, 1, randomLeaves(rng), randomChooser(rng))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}
