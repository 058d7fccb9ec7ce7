package codegen

import (
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// phase is the part of the step a value belongs to.
type phase uint8

const (
	phaseNone phase = iota // leaves, and values nothing needs
	phaseF                 // forward: the loss depends on it, per micro-batch
	phaseB                 // backward: a gradient depends on it, per micro-batch
	phaseU                 // update: run once, after the last micro-batch
)

// analysis is what Lower derives from the step graph before emitting anything.
type analysis struct {
	g    *ir.Graph
	loss ir.ValueID
	// phase of every value; a value needed both per micro-batch and by the update (a
	// constant, say) is phaseF/phaseB and also has alsoU set.
	phase []phase
	alsoU []bool
	// acc is true for the values accumulated over micro-batches and scaled by 1/B: the
	// gradients, the loss and any other scalar per-micro-batch output.
	acc []bool
	// grads lists the gradient of every param, in param order.
	grads []ir.ValueID
	// usedIn[v] lists the stages that use v as an operand, per micro-batch (index 0) and
	// in the update (index 1), sorted.
	usedIn [][2][]StageID
}

// checkPlan validates the plan's shape and every strategy, and classifies the step.
func checkPlan(p *Plan) (*analysis, error) {
	if p == nil || p.Step == nil {
		return nil, fmt.Errorf("codegen: plan has no step graph")
	}
	g := p.Step
	if p.Microbatches < 1 {
		return nil, fmt.Errorf("codegen: plan has %d micro-batches, expected at least 1", p.Microbatches)
	}
	if p.Schedule != program.GPipe && p.Schedule != program.OneFOneB {
		return nil, fmt.Errorf("codegen: unknown schedule %d, expected gpipe or 1f1b", int(p.Schedule))
	}
	if err := checkStages(p); err != nil {
		return nil, err
	}
	an, err := classify(g)
	if err != nil {
		return nil, err
	}
	an.usedIn = make([][2][]StageID, len(g.Values))
	var errs ir.ErrorList
	for id := range g.Values {
		if err := checkValue(p, an, ir.ValueID(id)); err != nil {
			errs = append(errs, asError(err))
		}
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return an, nil
}

func asError(err error) *ir.Error {
	if e, ok := err.(*ir.Error); ok {
		return e
	}
	return ir.Errorf(ir.Pos{}, "%s", err.Error())
}

func checkStages(p *Plan) error {
	if len(p.Stages) == 0 {
		return fmt.Errorf("codegen: plan has no stages")
	}
	if len(p.StageOf) != len(p.Step.Values) {
		return fmt.Errorf("codegen: StageOf has %d entries, expected one per value of the step (%d)",
			len(p.StageOf), len(p.Step.Values))
	}
	owner := map[program.DeviceID]int{}
	for i, s := range p.Stages {
		m := s.Mesh
		if m == nil || m.Shape[0] < 1 || m.Shape[1] < 1 || len(m.Devices) != m.Size() {
			return fmt.Errorf("codegen: stage %d has no valid mesh, expected Shape[0]*Shape[1] devices", i)
		}
		for _, d := range m.Devices {
			if j, dup := owner[d]; dup {
				return fmt.Errorf("codegen: device %d is in stage %d and stage %d, expected disjoint meshes", d, j, i)
			}
			owner[d] = i
		}
	}
	for id, s := range p.StageOf {
		if s < 0 || int(s) >= len(p.Stages) {
			v := p.Step.Value(ir.ValueID(id))
			return ir.Errorf(v.Pos, "codegen: value %s is on stage %d, expected 0..%d", v.Name, s, len(p.Stages)-1)
		}
	}
	return nil
}

// checkValue checks that a value the programs need has its layouts on its stage and that
// Lower can run its strategy, and records which stages use it.
func checkValue(p *Plan, an *analysis, id ir.ValueID) error {
	g := p.Step
	v := g.Value(id)
	ph := an.phase[id]
	if ph == phaseNone && !an.alsoU[id] && v.Op != ir.OpParam && v.Op != ir.OpState {
		return nil
	}
	for _, a := range v.Args {
		if madeWhereUsed(g.Value(a)) && p.StageOf[a] != p.StageOf[id] {
			continue // never sent
		}
		k := 0
		if ph == phaseU {
			k = 1
		}
		addStage(&an.usedIn[a][k], p.StageOf[id])
		if an.alsoU[id] {
			addStage(&an.usedIn[a][1], p.StageOf[id])
		}
	}
	if v.Op == ir.OpInput {
		return nil // loaded where used, in the layout its consumer asks for
	}
	st := &p.Stages[p.StageOf[id]]
	out, ok := st.Out[id]
	if !ok {
		return ir.Errorf(v.Pos, "codegen: value %s has no layout on stage %d, expected Stage.Out to hold it", v.Name, p.StageOf[id])
	}
	in := st.In[id]
	if !v.Op.IsLeaf() && len(v.Args) > 0 && in == nil {
		return ir.Errorf(v.Pos, "codegen: op %s has no operand layouts on stage %d, expected Stage.In to hold its strategy", v.Name, p.StageOf[id])
	}
	if r, ok := st.Resolved[id]; ok {
		if err := checkResolved(g, id, out, r, st.Mesh); err != nil {
			return err
		}
	}
	return CheckStrategy(g, id, in, out, st.Mesh)
}

// checkResolved checks a Stage.Resolved layout: of a partial result, itself not partial,
// reachable from it by collectives.
func checkResolved(g *ir.Graph, id ir.ValueID, out, r mesh.Spec, m *mesh.LogicalMesh) error {
	v := g.Value(id)
	if out.Partial == 0 || r.Partial != 0 {
		return ir.Errorf(v.Pos, "codegen: value %s: resolved layout %s of layout %s, expected a layout without partial sums of a partial one", v.Name, r, out)
	}
	if _, err := mesh.ReshardCost(m, v.Type.Shape, v.Type.DType.Size(), out, r); err != nil {
		return ir.Errorf(v.Pos, "codegen: value %s: resolved layout %s: %v", v.Name, r, err)
	}
	return nil
}

func addStage(list *[]StageID, s StageID) {
	for i, x := range *list {
		if x == s {
			return
		}
		if x > s {
			*list = append((*list)[:i], append([]StageID{s}, (*list)[i:]...)...)
			return
		}
	}
	*list = append(*list, s)
}

// classify splits the step into forward, backward and update parts. The per-micro-batch
// part is every op the loss or a gradient depends on; the update is every other op, run
// once. An update op may use a per-micro-batch value only if it is accumulated (a gradient,
// the loss) or does not depend on the data (a constant, which the update recomputes).
func classify(g *ir.Graph) (*analysis, error) {
	if len(g.Outputs) == 0 || g.Value(g.Outputs[0].Value).Type.Shape.Rank() != 0 {
		return nil, fmt.Errorf("codegen: step %s has no scalar loss as its first output", g.Name)
	}
	n := len(g.Values)
	an := &analysis{g: g, loss: g.Outputs[0].Value, phase: make([]phase, n), alsoU: make([]bool, n), acc: make([]bool, n)}
	gradOf := g.ByRole(ir.RoleGrad)
	for _, p := range g.Leaves(ir.OpParam) {
		gid, ok := gradOf[p], gradOf[p] != ir.NoValue
		if !ok {
			return nil, ir.Errorf(g.Value(p).Pos, "codegen: param %s has no gradient, expected a value marked role=grad of=%s (passes.TrainingStep marks them)", g.Value(p).Name, g.Value(p).Name)
		}
		an.grads = append(an.grads, gid)
		an.acc[gid] = true
	}
	an.acc[an.loss] = true
	fwd := ancestors(g, []ir.ValueID{an.loss})
	mb := ancestors(g, append([]ir.ValueID{an.loss}, an.grads...))
	dataDep := dependsOnInputs(g)
	for _, o := range g.Outputs[1:] {
		if mb[o.Value] {
			if g.Value(o.Value).Type.Shape.Rank() != 0 {
				v := g.Value(o.Value)
				return nil, ir.Errorf(o.Pos, "codegen: output %s is per micro-batch and not a scalar, expected outputs to be scalars (averaged) or update values", v.Name)
			}
			an.acc[o.Value] = true
		}
	}
	for id := range g.Values {
		v := g.Value(ir.ValueID(id))
		switch {
		case v.Op.IsLeaf():
		case fwd[id]:
			an.phase[id] = phaseF
		case mb[id]:
			an.phase[id] = phaseB
		default:
			an.phase[id] = phaseU
		}
	}
	return an, markUpdateNeeds(g, an, dataDep)
}

// markUpdateNeeds walks the update ops backwards and marks the per-micro-batch values
// they need recomputed (alsoU), refusing data-dependent ones that are not accumulated.
func markUpdateNeeds(g *ir.Graph, an *analysis, dataDep []bool) error {
	need := make([]bool, len(g.Values))
	for _, u := range g.Updates {
		need[u.Value] = true
	}
	for _, o := range g.Outputs {
		need[o.Value] = true
	}
	for id := len(g.Values) - 1; id >= 0; id-- {
		v := g.Value(ir.ValueID(id))
		if !need[id] || v.Op.IsLeaf() || an.acc[id] {
			continue
		}
		if an.phase[id] != phaseU {
			if dataDep[id] {
				return ir.Errorf(v.Pos, "codegen: the update needs %s, a per-micro-batch value that is not accumulated, expected it to use only gradients, params and state", v.Name)
			}
			an.alsoU[id] = true
		}
		for _, a := range v.Args {
			need[a] = true
		}
	}
	for id := range g.Values {
		if an.phase[id] == phaseU && !need[id] {
			an.phase[id] = phaseNone // dead: nothing stores or updates it
		}
	}
	for _, u := range g.Updates {
		if an.phase[u.Value] != phaseU && !an.alsoU[u.Value] {
			v := g.Value(u.Value)
			return ir.Errorf(v.Pos, "codegen: update value %s is computed per micro-batch, expected it to be part of the update", v.Name)
		}
	}
	return nil
}

// ancestors marks roots and every value they depend on.
func ancestors(g *ir.Graph, roots []ir.ValueID) []bool {
	mark := make([]bool, len(g.Values))
	for _, r := range roots {
		mark[r] = true
	}
	for id := len(g.Values) - 1; id >= 0; id-- {
		if mark[id] {
			for _, a := range g.Value(ir.ValueID(id)).Args {
				mark[a] = true
			}
		}
	}
	return mark
}

// dependsOnInputs marks the values that depend on a data input.
func dependsOnInputs(g *ir.Graph) []bool {
	dep := make([]bool, len(g.Values))
	for id := range g.Values {
		v := g.Value(ir.ValueID(id))
		dep[id] = v.Op == ir.OpInput
		for _, a := range v.Args {
			dep[id] = dep[id] || dep[a]
		}
	}
	return dep
}

// outSpec returns the layout value id is produced in on its stage.
func (p *Plan) outSpec(id ir.ValueID) mesh.Spec {
	return p.Stages[p.StageOf[id]].Out[id]
}

// madeWhereUsed reports whether v is filled on every stage that uses it instead of being
// sent there: a constant costs nothing to make, and sending one across stages would tie
// their schedules together (a constant shared by the backward of every stage deadlocks
// 1F1B). Parameters, inputs and state are likewise loaded where used, not sent.
func madeWhereUsed(v *ir.Value) bool { return v.Op == ir.OpConstant }

// StepParts says, per value of a training step (Plan.Step), what Lower runs once per step
// rather than once per micro-batch: the search prices the two apart (a pipeline pays the
// micro-batch part B times and the step part once).
type StepParts struct {
	// Update[v]: v is an op of the update block, run once after the last micro-batch.
	Update []bool
	// Accumulated[v]: v (a gradient, the loss) is accumulated over the micro-batches in
	// the layout its op leaves, partial sums included; the collectives that resolve them
	// run once, in the update, towards the layouts the update asks for.
	Accumulated []bool
	// Dead[v]: v is an op nothing needs (an adjoint of a value that has no gradient, say):
	// Lower emits nothing for it, so the search should not price it.
	Dead []bool
}

// Parts classifies step as Lower does; the error is Lower's for a step it cannot split.
func Parts(step *ir.Graph) (*StepParts, error) {
	an, err := classify(step)
	if err != nil {
		return nil, err
	}
	sp := &StepParts{Update: make([]bool, len(step.Values)), Accumulated: an.acc, Dead: make([]bool, len(step.Values))}
	for id, ph := range an.phase {
		sp.Update[id] = ph == phaseU
		sp.Dead[id] = ph == phaseNone && !an.alsoU[id] && !step.Values[id].Op.IsLeaf()
	}
	return sp, nil
}
