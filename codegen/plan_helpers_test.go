package codegen_test

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/program"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// Test plans are built by hand here, without the sharding pass: a leaf rule gives params,
// state and inputs their layout, and a chooser picks each op's strategy.

// chooser picks the strategy of op id on m, given the layouts its operands were produced in.
type chooser func(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh, hint []mesh.Spec) ([]mesh.Spec, mesh.Spec)

// leafRule gives a leaf its layout.
type leafRule func(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh) mesh.Spec

// specsOf turns a label assignment into operand and result layouts.
func specsOf(d ir.Dims, axes []mesh.AxisSet) ([]mesh.Spec, mesh.Spec) {
	place := func(ls []int) mesh.Spec {
		s := mesh.Replicated(len(ls))
		for k, l := range ls {
			if l >= 0 {
				s.Dims[k] = axes[l]
			}
		}
		return s
	}
	in := make([]mesh.Spec, len(d.Operands))
	for i, ls := range d.Operands {
		in[i] = place(ls)
	}
	out := place(d.Result)
	for _, l := range d.Contracted() {
		out.Partial |= axes[l]
	}
	return in, out
}

// replicated is the strategy that splits nothing.
func replicated(g *ir.Graph, id ir.ValueID) ([]mesh.Spec, mesh.Spec) {
	return specsOf(g.Dims(id), make([]mesh.AxisSet, g.Dims(id).NumLabels()))
}

// propagate follows the operands' layouts: each label takes the axes of the first operand
// dim that splits it, unless that would reuse an axis, split a fixed label or not divide.
// A strategy codegen.CheckStrategy refuses falls back to replicated.
func propagate(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh, hint []mesh.Spec) ([]mesh.Spec, mesh.Spec) {
	d := g.Dims(id)
	axes := make([]mesh.AxisSet, d.NumLabels())
	var used mesh.AxisSet
	for i, ls := range d.Operands {
		for k, l := range ls {
			if l < 0 || k >= len(hint[i].Dims) {
				continue
			}
			a := hint[i].Dims[k]
			if a == 0 || axes[l] != 0 || used&a != 0 || d.Fixed[l] || d.Sizes[l]%m.AxisSize(a) != 0 {
				continue
			}
			axes[l], used = a, used|a
		}
	}
	in, out := specsOf(d, axes)
	if codegen.CheckStrategy(g, id, in, out, m) != nil {
		return replicated(g, id)
	}
	return in, out
}

// randomChooser gives each mesh axis of size > 1 to a random splittable label (or none),
// as the sharding pass's enumeration does, and keeps the first codegen.CheckStrategy accepts.
func randomChooser(rng *rand.Rand) chooser {
	return func(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh, hint []mesh.Spec) ([]mesh.Spec, mesh.Spec) {
		d := g.Dims(id)
		for range 20 {
			axes := make([]mesh.AxisSet, d.NumLabels())
			for a := range 2 {
				if m.Shape[a] == 1 || d.NumLabels() == 0 || rng.Intn(4) == 0 {
					continue
				}
				l := rng.Intn(d.NumLabels())
				axes[l] |= mesh.AxisSet(1 << a)
				if d.Sizes[l]%m.AxisSize(axes[l]) != 0 {
					axes[l] &^= mesh.AxisSet(1 << a)
				}
			}
			in, out := specsOf(d, axes)
			if codegen.CheckStrategy(g, id, in, out, m) == nil {
				return in, out
			}
		}
		return propagate(g, id, m, hint)
	}
}

// randomLeaves lays every leaf out at random: each mesh axis on a random dim it divides.
func randomLeaves(rng *rand.Rand) leafRule {
	return func(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh) mesh.Spec {
		t := g.Value(id).Type
		s := mesh.Replicated(t.Shape.Rank())
		for a := range 2 {
			if m.Shape[a] == 1 || t.Shape.Rank() == 0 || rng.Intn(3) == 0 {
				continue
			}
			k := rng.Intn(t.Shape.Rank())
			old := s.Dims[k]
			if old != 0 && !(old == mesh.Axis0 && a == 1) {
				continue
			}
			s.Dims[k] |= mesh.AxisSet(1 << a)
			if _, err := m.LocalShape(t.Shape, s); err != nil {
				s.Dims[k] = old
			}
		}
		return s
	}
}

// dataParallel splits every input's batch dim on axes and replicates params and state.
func dataParallel(axes mesh.AxisSet) leafRule {
	return func(g *ir.Graph, id ir.ValueID, m *mesh.LogicalMesh) mesh.Spec {
		v := g.Value(id)
		s := mesh.Replicated(v.Type.Shape.Rank())
		if b := v.BatchDim(); b >= 0 && v.Type.Shape[b]%m.AxisSize(axes) == 0 {
			s.Dims[b] = axes
		}
		return s
	}
}

// buildPlan lays out every value of step on its stage's mesh with leaf and choose.
func buildPlan(step *ir.Graph, b int, sched program.Schedule, meshes []*mesh.LogicalMesh, stageOf []codegen.StageID,
	leaf leafRule, choose chooser) *codegen.Plan {
	p := &codegen.Plan{Step: step, Microbatches: b, Schedule: sched, StageOf: stageOf}
	for _, m := range meshes {
		p.Stages = append(p.Stages, codegen.Stage{Mesh: m, Out: map[ir.ValueID]mesh.Spec{}, In: map[ir.ValueID][]mesh.Spec{}})
	}
	outOf := func(a ir.ValueID) mesh.Spec {
		if s, ok := p.Stages[stageOf[a]].Out[a]; ok {
			return s
		}
		return mesh.Replicated(step.Value(a).Type.Shape.Rank())
	}
	for vid := range step.Values {
		id := ir.ValueID(vid)
		v := step.Value(id)
		st := &p.Stages[stageOf[id]]
		if v.Op.IsLeaf() {
			st.Out[id] = leaf(step, id, st.Mesh)
			continue
		}
		hint := make([]mesh.Spec, len(v.Args))
		for i, a := range v.Args {
			hint[i] = outOf(a)
		}
		st.In[id], st.Out[id] = choose(step, id, st.Mesh, hint)
	}
	return p
}

// oneStage puts every value on stage 0.
func oneStage(g *ir.Graph) []codegen.StageID { return make([]codegen.StageID, len(g.Values)) }

// meshAt is an (n0, n1) mesh over devices first, first+1, ... with unit costs.
func meshAt(t testing.TB, n0, n1, first int) *mesh.LogicalMesh {
	m, err := mesh.NewUniformMesh(n0, n1, 1e-6, 1e-9)
	require.NoError(t, err)
	for i := range m.Devices {
		m.Devices[i] += mesh.DeviceID(first)
	}
	return m
}

// equivCase is one proof: a forward graph, an optimizer, and how to plan its micro-batch
// step.
type equivCase struct {
	name string
	fwd  func(t testing.TB) *ir.Graph
	opt  passes.Optimizer
	b    int
	plan func(t testing.TB, step *ir.Graph) *codegen.Plan
	// tol overrides the bound of relErr: 0 means 1e-9 for f64 steps, 1e-4 otherwise.
	tol float64
	// stepwise starts every serial step from the parallel run's params and state, as the
	// Trainer's serial check does, instead of letting the two runs go on apart: in bf16 a
	// weight one ulp apart moves the next step's gradients by more than the step's own error.
	stepwise bool
}

// relErr is the norm-wise relative difference max|a−b| / max(max|a|, max|b|, 1e-6):
// element-wise ratios blow up on entries that cancel to rounding noise, which says nothing
// about the program; and a tensor that vanishes mathematically (the gradient of attention's
// key bias, which softmax cancels) is rounding noise of 1e-17 on both sides, so its scale is
// floored.
func relErr(a, b *kernels.Tensor) float64 {
	if a == nil || b == nil || a.Len() != b.Len() {
		return math.Inf(1)
	}
	var diff, scale float64
	for i := range a.Len() {
		x, y := a.At(i), b.At(i)
		diff = max(diff, math.Abs(x-y))
		scale = max(scale, math.Abs(x), math.Abs(y))
	}
	return diff / max(scale, 1e-6)
}

// sum is a + b element by element, in f64.
func sum(a, b *kernels.Tensor) *kernels.Tensor {
	if a == nil || b == nil || a.Len() != b.Len() {
		return nil
	}
	out := kernels.New(ir.Type{DType: ir.F64, Shape: a.Type.Shape})
	for i := range a.Len() {
		out.F64[i] = a.At(i) + b.At(i)
	}
	return out
}

// runEquiv lowers the case's plan, runs three training steps on the runtime and on the
// serial interpreter (full batch), and checks loss, gradients, updated params and state,
// and the predicted counters after every step.
func runEquiv(t *testing.T, c equivCase) []*program.Program {
	t.Helper()
	ctx := context.Background()
	fwd := c.fwd(t)
	full, err := passes.TrainingStep(fwd, c.opt)
	require.NoError(t, err)
	batch, err := passes.BatchSize(fwd)
	require.NoError(t, err)
	mbFwd, err := passes.Rebatch(fwd, batch/c.b)
	require.NoError(t, err)
	step, err := passes.TrainingStep(mbFwd, c.opt)
	require.NoError(t, err)
	plan := c.plan(t, step)
	progs, err := codegen.Lower(plan)
	require.NoError(t, err)
	tol := 1e-9
	if full.Value(full.Outputs[0].Value).Type.DType != ir.F64 {
		tol = 1e-4
	}
	if c.tol > 0 {
		tol = c.tol
	}
	masters := passes.MasterRemainders(full)
	ref := interp.InitParams(full, 1)
	for k, v := range interp.RandomInputs(full, 2) {
		ref[k] = v
	}
	par := runtime.Data{}
	for k, v := range ref {
		par[k] = v
	}
	for it := range 3 {
		want, err := interp.RunKeep(ctx, full, ref)
		require.NoError(t, err)
		got, err := runtime.Run(ctx, progs, par, runtime.Options{})
		require.NoError(t, err, "step %d", it)
		lossName := full.Value(full.Outputs[0].Value).Name
		require.Less(t, relErr(got.Stores[lossName], want.Outputs[0]), tol, "step %d loss", it)
		for _, p := range full.Leaves(ir.OpParam) {
			name := "grad." + full.Value(p).Name
			gid, ok := full.Lookup(name)
			require.True(t, ok)
			require.Less(t, relErr(got.Stores[name], want.Values[gid]), tol, "step %d %s", it, name)
		}
		for _, u := range full.Updates {
			name := full.Value(u.Target).Name
			if p, ok := masters[u.Target]; ok {
				// A master weight's remainder is rounding-sized: compare the master it completes.
				pn := full.Value(p).Name
				require.Less(t, relErr(sum(got.Stores[pn], got.Stores[name]), sum(want.Updates[pn], want.Updates[name])), tol,
					"step %d master weight of %s", it, pn)
			} else {
				require.Less(t, relErr(got.Stores[name], want.Updates[name]), tol, "step %d update of %s", it, name)
			}
			par[name] = got.Stores[name]
		}
		pred := codegen.Predict(plan, progs)
		for i, d := range got.Devices {
			require.Equal(t, pred[i], codegen.DeviceCounters{Device: d.Device, PeakBytes: d.PeakBytes,
				BytesSent: d.BytesSent, BytesReceived: d.BytesReceived}, "step %d counters", it)
		}
		if c.stepwise {
			for _, u := range full.Updates {
				ref[full.Value(u.Target).Name] = got.Stores[full.Value(u.Target).Name]
			}
		} else {
			ref.Apply(want)
		}
	}
	return progs
}

// layerStages assigns a pipeline stage per layer: a forward op named "l<k>.…" goes to
// stage min(k, s−1); other forward ops go to stage 0 before the first layer (embeddings)
// and to the last stage after it (the head and the loss).
// Backward and update ops follow the earliest stage among their computed operands (so a
// layer's backward runs where its forward did). Backward and update ops without such
// operands (constants) go to the latest stage that uses them, so that they flow back with
// the gradients; leaves go to the earliest stage that uses them.
func layerStages(g *ir.Graph, s int) []codegen.StageID {
	n := len(g.Values)
	stage := make([]int, n)
	fwd := make([]bool, n)
	fwd[g.Outputs[0].Value] = true
	for id := n - 1; id >= 0; id-- {
		if fwd[id] {
			for _, a := range g.Value(ir.ValueID(id)).Args {
				fwd[a] = true
			}
		}
	}
	computed := func(a ir.ValueID) bool {
		v := g.Value(a)
		return !v.Op.IsLeaf() && len(v.Args) > 0
	}
	seenLayer := false
	for id := range n {
		v := g.Value(ir.ValueID(id))
		stage[id] = -1
		switch {
		case v.Op.IsLeaf():
		case fwd[id]:
			stage[id] = 0
			if seenLayer {
				stage[id] = s - 1
			}
			var k int
			if _, err := fmt.Sscanf(v.Name, "l%d.", &k); err == nil {
				stage[id], seenLayer = min(k, s-1), true
			}
		default:
			for _, a := range v.Args {
				if computed(a) && stage[a] >= 0 && (stage[id] < 0 || stage[a] < stage[id]) {
					stage[id] = stage[a]
				}
			}
		}
	}
	users := g.Users()
	for id := n - 1; id >= 0; id-- {
		if stage[id] >= 0 {
			continue
		}
		if g.Value(ir.ValueID(id)).Op.IsLeaf() {
			stage[id] = s - 1
			for _, u := range users[id] {
				stage[id] = min(stage[id], stage[u])
			}
			continue
		}
		stage[id] = 0
		for _, u := range users[id] {
			stage[id] = max(stage[id], stage[u])
		}
	}
	out := make([]codegen.StageID, n)
	for i, x := range stage {
		out[i] = codegen.StageID(x)
	}
	return out
}

// pipeline plans s stages, stage i on its own mesh shapes[i] after the previous ones'.
func pipeline(shapes [][2]int, b int, sched program.Schedule, leaf leafRule, choose chooser) func(t testing.TB, step *ir.Graph) *codegen.Plan {
	return func(t testing.TB, step *ir.Graph) *codegen.Plan {
		var meshes []*mesh.LogicalMesh
		first := 0
		for _, sh := range shapes {
			meshes = append(meshes, meshAt(t, sh[0], sh[1], first))
			first += sh[0] * sh[1]
		}
		return buildPlan(step, b, sched, meshes, layerStages(step, len(shapes)), leaf, choose)
	}
}
