package codegen_test

import (
	"github.com/autopar/autopar/codegen"
	"testing"

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
func mlp(layers int) func(t testing.TB) *ir.Graph {
	return func(t testing.TB) *ir.Graph {
		m := zoo.NewMLP()
		m.DType, m.Layers, m.Hidden, m.Batch, m.In, m.Classes = "f64", layers, 16, 16, 8, 8
		g, err := m.Build()
		require.NoError(t, err)
		return g
	}
}

// singleStage plans the whole step on one mesh with the given leaf rule and chooser.
func singleStage(n0, n1, b int, leaf leafRule, choose chooser) func(t testing.TB, step *ir.Graph) *codegen.Plan {
	return func(t testing.TB, step *ir.Graph) *codegen.Plan {
		return buildPlan(step, b, codegen.GPipe, []*mesh.LogicalMesh{meshAt(t, n0, n1, 0)}, oneStage(step), leaf, choose)
	}
}

func TestEquivDataParallel(t *testing.T) {
	cases := []equivCase{
		{name: "1x1", fwd: mlp(2), opt: sgd, b: 1, plan: singleStage(1, 1, 1, dataParallel(mesh.AxesNone), propagate)},
		{name: "1x2", fwd: mlp(2), opt: sgd, b: 1, plan: singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "1x4-adam", fwd: mlp(2), opt: adam, b: 1, plan: singleStage(1, 4, 1, dataParallel(mesh.Axis1), propagate)},
		{name: "2x2", fwd: mlp(2), opt: sgd, b: 1, plan: singleStage(2, 2, 1, dataParallel(mesh.AxesBoth), propagate)},
		{name: "1x2-microbatches", fwd: mlp(2), opt: adam, b: 2, plan: singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runEquiv(t, c) })
	}
}
