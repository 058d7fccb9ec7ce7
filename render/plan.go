package render

import (
	"errors"
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/plan"
)

// index is what the graph views need to know about a plan: where each of the step's
// values is listed and on which logical mesh each stage runs.
type index struct {
	p      *plan.Plan
	step   *ir.Graph
	meshes []*mesh.LogicalMesh
	// pos[s][id] is the position of value id in p.Stages[s].Values, or -1.
	pos [][]int
	// owner[id] is the first stage listing id (the one that computes it, or for a leaf
	// the one that holds it), or -1.
	owner []int
	// phase[id] is the pass value id of the step belongs to: forward, backward, update.
	phase []phase
}

// errNoStep is returned for a plan built by hand rather than read or compiled.
var errNoStep = errors.New("render: the plan has no training step, expected one from autopar.Compile or plan.ReadPlan")

func newIndex(p *plan.Plan) (*index, error) {
	if p == nil || p.Step() == nil {
		return nil, errNoStep
	}
	step := p.Step()
	ix := &index{p: p, step: step, owner: make([]int, len(step.Values)), phase: phases(step)}
	for i := range ix.owner {
		ix.owner[i] = -1
	}
	for s := range p.Stages {
		st := &p.Stages[s]
		lm, err := mesh.NewLogicalMeshAt(&p.Cluster, st.Submesh, firstDevice(st), st.Logical[0], st.Logical[1])
		if err != nil {
			return nil, fmt.Errorf("render: stage %d: %w", s, err)
		}
		ix.meshes = append(ix.meshes, lm)
		pos := make([]int, len(step.Values))
		for i := range pos {
			pos[i] = -1
		}
		for k, v := range st.Values {
			id, ok := step.Lookup(v.Name)
			if !ok {
				return nil, fmt.Errorf("render: stage %d lists value %s, which the training step does not have", s, v.Name)
			}
			if err := checkSpecs(step, id, v); err != nil {
				return nil, fmt.Errorf("render: stage %d: %w", s, err)
			}
			pos[id] = k
			if ix.owner[id] < 0 {
				ix.owner[id] = s
			}
		}
		ix.pos = append(ix.pos, pos)
	}
	return ix, nil
}

func firstDevice(st *plan.Stage) mesh.DeviceID {
	if len(st.Devices) == 0 {
		return 0 // NewLogicalMeshAt then reports the submesh; Devices is only its origin
	}
	return mesh.DeviceID(st.Devices[0])
}

// checkSpecs rejects a value whose specs do not match its tensor's rank or its operand
// count: drawing such a plan would draw something the plan does not say.
func checkSpecs(g *ir.Graph, id ir.ValueID, v plan.ValuePlan) error {
	val := g.Value(id)
	if err := specFits(v.Spec, val.Type); err != nil {
		return fmt.Errorf("value %s: %w", v.Name, err)
	}
	if len(v.In) == 0 {
		return nil
	}
	if len(v.In) != len(val.Args) {
		return fmt.Errorf("value %s has %d operand specs, expected %d (one per operand)", v.Name, len(v.In), len(val.Args))
	}
	for i, a := range val.Args {
		if err := specFits(v.In[i], g.Value(a).Type); err != nil {
			return fmt.Errorf("value %s operand %d (%s): %w", v.Name, i, g.Value(a).Name, err)
		}
	}
	return nil
}

func specFits(s mesh.Spec, t ir.Type) error {
	if len(s.Dims) != t.Shape.Rank() {
		return fmt.Errorf("spec %q has %d dims, expected %d for %s", s.String(), len(s.Dims), t.Shape.Rank(), t)
	}
	return s.Validate()
}

// value returns the plan entry of value id in stage s; id must be listed there.
func (ix *index) value(s int, id ir.ValueID) *plan.ValuePlan {
	k := ix.pos[s][id]
	if k < 0 {
		panic(fmt.Sprintf("render: value %s is not listed in stage %d", ix.step.Value(id).Name, s))
	}
	return &ix.p.Stages[s].Values[k]
}

// edge is one operand use: value From (listed in stage FromStage) read as operand
// Operand of value To (listed in stage ToStage).
type edge struct {
	FromStage, ToStage int
	From, To           ir.ValueID
	Operand            int
}

// Cross reports whether the edge crosses stages, so the value travels by send/recv.
func (e edge) Cross() bool { return e.FromStage != e.ToStage }

// edges lists every operand use of every listed value, stage by stage in plan order. An
// operand listed in the consumer's own stage is read there (constants are refilled on each
// stage that uses them); any other comes from the first stage that lists it.
func (ix *index) edges() ([]edge, error) {
	var out []edge
	for s, st := range ix.p.Stages {
		for _, v := range st.Values {
			to, _ := ix.step.Lookup(v.Name)
			for i, a := range ix.step.Value(to).Args {
				from := s
				if ix.pos[s][a] < 0 {
					from = ix.owner[a]
				}
				if from < 0 {
					return nil, fmt.Errorf("render: value %s of stage %d reads %s, which no stage of the plan lists", v.Name, s, ix.step.Value(a).Name)
				}
				out = append(out, edge{FromStage: from, ToStage: s, From: a, To: to, Operand: i})
			}
		}
	}
	return out, nil
}

// reshard is what an edge costs: the collectives that turn the producer's spec into the
// spec the consumer reads (none when they agree), or for a cross-stage edge the transfer.
type reshard struct {
	From, To mesh.Spec
	Steps    []mesh.Step
	Time     float64 // seconds, per micro-batch
	Bytes    int64   // the whole tensor
}

// Needed reports whether the edge moves anything: a cross-stage transfer, or a layout
// change (a free slice included, so that a reader sees every spec change).
func (r reshard) Needed(cross bool) bool { return cross || len(r.Steps) > 0 }

// reshardOf prices edge e with mesh.ReshardCost on the stage's logical mesh. A consumer
// that lists no operand specs (a leaf) reads the producer's layout. Specs ReshardCost
// cannot relate (a split the mesh does not divide) are an error: the plan cannot be right.
func (ix *index) reshardOf(e edge, memo map[string]reshard) (reshard, error) {
	prod := ix.value(e.FromStage, e.From)
	cons := ix.value(e.ToStage, e.To)
	t := ix.step.Value(e.From).Type
	r := reshard{From: prod.Spec, To: prod.Spec, Bytes: t.Bytes()}
	if len(cons.In) > 0 {
		r.To = cons.In[e.Operand]
	}
	if e.Cross() || r.From.Equal(r.To) {
		return r, nil
	}
	key := fmt.Sprintf("%d %s %d %s %s", e.ToStage, t.Shape, t.DType.Size(), r.From, r.To)
	if m, ok := memo[key]; ok {
		return m, nil
	}
	res, err := mesh.ReshardCost(ix.meshes[e.ToStage], t.Shape, t.DType.Size(), r.From, r.To)
	if err != nil {
		return reshard{}, fmt.Errorf("render: %s → %s (operand %d) in stage %d: %w",
			ix.step.Value(e.From).Name, ix.step.Value(e.To).Name, e.Operand, e.ToStage, err)
	}
	r.Steps, r.Time = res.Steps, res.Time
	memo[key] = r
	return r, nil
}
