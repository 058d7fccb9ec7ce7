package autopar

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/export"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Export returns the plan as package export reads it: each stage's logical mesh over its
// devices, and each value it holds with its role (param, data input, optimizer state,
// forward activation, or the backward and update values the frameworks derive), type and
// spec. A leaf several stages read belongs to the first, as in CodegenPlan. The plan
// must have been read with ReadPlan or made by Compile. source names the plan in the
// exported file's header ("" for none).
func (p *Plan) Export(source string) (*export.Plan, error) {
	if p.Step() == nil || p.Forward() == nil {
		return nil, fmt.Errorf("plan: no training step: read the plan with ReadPlan")
	}
	ep := &export.Plan{Model: p.Model, Source: source, Batch: p.Batch, Microbatches: p.Microbatches, Schedule: p.Schedule,
		Optimizer: export.Optimizer{Kind: p.Optimizer.Kind, LR: p.Optimizer.LR, Momentum: p.Optimizer.Momentum,
			Beta1: p.Optimizer.Beta1, Beta2: p.Optimizer.Beta2, Eps: p.Optimizer.Eps, WeightDecay: p.Optimizer.WeightDecay}}
	users := p.Forward().Users()
	held := make([]*export.Value, len(p.Step().Values)) // by ValueID: the exported leaf
	for si, s := range p.Stages {
		lm, err := mesh.NewLogicalMeshAt(&p.Cluster, s.Submesh, mesh.DeviceID(s.Devices[0]), s.Logical[0], s.Logical[1])
		if err != nil {
			return nil, fmt.Errorf("plan: stage %d: %w", si, err)
		}
		es := export.Stage{FirstLayer: s.FirstLayer, LastLayer: s.LastLayer, Mesh: s.Logical, Recompute: s.Recompute,
			RecomputeLayers: s.RecomputeLayers}
		for _, d := range lm.Devices {
			es.Devices = append(es.Devices, int(d))
		}
		for _, v := range s.Values {
			id, ok := p.Step().Lookup(v.Name)
			if !ok {
				continue
			}
			if first := held[id]; first != nil {
				first.AlsoOn = append(first.AlsoOn, export.Use{Stage: si, Spec: v.Spec})
				continue
			}
			val := p.Step().Value(id)
			es.Values = append(es.Values, export.Value{Name: v.Name, Op: v.Op, Role: p.roleOf(val),
				DType: val.Type.DType.String(), Shape: val.Type.Shape.Clone(), BatchDim: val.BatchDim(), Spec: v.Spec,
				Users: p.forwardUsers(v.Name, users)})
		}
		ep.Stages = append(ep.Stages, es)
		for i := range es.Values {
			id, _ := p.Step().Lookup(es.Values[i].Name)
			held[id] = &ep.Stages[si].Values[i]
		}
	}
	return ep, nil
}

// forwardUsers lists the ops of the forward graph that read the param name, in graph
// order without repeats; nil for anything but a param of the forward graph.
func (p *Plan) forwardUsers(name string, users [][]ir.ValueID) []string {
	id, ok := p.Forward().Lookup(name)
	if !ok || p.Forward().Value(id).Op != ir.OpParam {
		return nil
	}
	var ops []string
	for _, u := range users[id] {
		if op := p.Forward().Value(u).Op.String(); !slices.Contains(ops, op) {
			ops = append(ops, op)
		}
	}
	return ops
}

// roleOf says what a value of the step is to a user's program: leaves by their op, and
// an op's value is an activation when it is the model's own (ir.RoleForward: no pass made
// it), backward otherwise (a gradient, an optimizer op).
func (p *Plan) roleOf(v *ir.Value) export.Role {
	switch v.Op {
	case ir.OpParam:
		return export.Param
	case ir.OpInput:
		return export.Input
	case ir.OpState:
		return export.State
	}
	if v.Prov.IsForward() {
		return export.Activation
	}
	return export.Backward
}
