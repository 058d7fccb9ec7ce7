package plan

import (
	"errors"
	"fmt"
	"sort"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// DeviceMemory is one device's predicted peak, by kind, in bytes. Total = Weights +
// Gradients + Optimizer + Activations; it equals its stage's MemoryBytes.
type DeviceMemory struct {
	Device      int   `json:"device"`
	Stage       int   `json:"stage"`
	Weights     int64 `json:"weights"`     // the local shards of the params under their specs
	Gradients   int64 `json:"gradients"`   // one accumulator per param, sharded like it
	Optimizer   int64 `json:"optimizer"`   // the local shards of the optimizer state
	Activations int64 `json:"activations"` // ActBytes × InFlight + RecomputeBytes
	Total       int64 `json:"total"`
	Capacity    int64 `json:"capacity"`
}

// MemoryBreakdown splits every device's predicted peak into weights, gradients, optimizer
// state and activations, sorted by device. It counts as compile's memory check does: every
// param and state a stage lists, sharded under its spec on the stage's logical mesh. It
// relies on the layouts ReadPlan checked (see checkLayouts).
func (p *Plan) MemoryBreakdown() []DeviceMemory {
	g := p.step
	if g == nil {
		panic("plan: MemoryBreakdown on a plan with no training step")
	}
	var out []DeviceMemory
	for si, s := range p.Stages {
		lm, err := mesh.NewLogicalMesh(&p.Cluster, s.Submesh, s.Logical[0], s.Logical[1])
		if err != nil {
			panic(fmt.Sprintf("plan: stage %d: %v", si, err))
		}
		dm := DeviceMemory{Stage: si, Activations: s.ActBytes*int64(s.InFlight) + s.RecomputeBytes, Capacity: p.Predicted.DeviceMemory}
		for _, v := range s.Values {
			if v.Op != ir.OpParam.String() && v.Op != ir.OpState.String() {
				continue
			}
			b, err := localBytes(g, lm, v)
			if err != nil {
				panic(fmt.Sprintf("plan: stage %d: %v", si, err))
			}
			if v.Op == ir.OpState.String() {
				dm.Optimizer += b
			} else {
				dm.Weights += b
				dm.Gradients += b
			}
		}
		dm.Total = dm.Weights + dm.Gradients + dm.Optimizer + dm.Activations
		for _, d := range s.Devices {
			dm.Device = d
			out = append(out, dm)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// checkLayouts returns an error unless every stage's devices and logical mesh exist on the
// plan's cluster and every spec is valid and divides its value's shape: a hand-edited
// plan.json can parse and still describe layouts nothing can hold. ReadPlan runs it.
func (p *Plan) checkLayouts() error {
	g := p.step
	if g == nil {
		return errors.New("plan: no training step: read the plan with ReadPlan")
	}
	for si, s := range p.Stages {
		if len(s.Devices) == 0 || len(s.Devices) != s.Submesh.NumDevices() {
			return fmt.Errorf("plan: stage %d lists %d devices for submesh %s", si, len(s.Devices), s.Submesh)
		}
		lm, err := mesh.NewLogicalMeshAt(&p.Cluster, s.Submesh, mesh.DeviceID(s.Devices[0]), s.Logical[0], s.Logical[1])
		if err != nil {
			return fmt.Errorf("plan: stage %d: %w", si, err)
		}
		for k, d := range lm.Devices {
			if int(d) != s.Devices[k] {
				return fmt.Errorf("plan: stage %d lists devices %v, but submesh %s from device %d holds %v", si, s.Devices, s.Submesh, s.Devices[0], lm.Devices)
			}
		}
		for _, v := range s.Values {
			if err := v.Spec.Validate(); err != nil {
				return fmt.Errorf("plan: stage %d: %s: %w", si, v.Name, err)
			}
			if _, err := localBytes(g, lm, v); err != nil {
				return fmt.Errorf("plan: stage %d: %w", si, err)
			}
		}
	}
	return nil
}

// localBytes is the bytes one device holds of value v of g under its spec.
func localBytes(g *ir.Graph, lm *mesh.LogicalMesh, v ValuePlan) (int64, error) {
	id, ok := g.Lookup(v.Name)
	if !ok {
		return 0, fmt.Errorf("value %s is not in the graph", v.Name)
	}
	t := g.Value(id).Type
	b, err := lm.LocalBytes(t.Shape, t.DType.Size(), v.Spec)
	if err != nil {
		return 0, fmt.Errorf("%s %s under %s: %w", v.Name, t, v.Spec, err)
	}
	return b, nil
}
