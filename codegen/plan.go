package codegen

import (
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// StageID numbers a pipeline stage of a Plan: Plan.Stages[id].
type StageID int

// Schedule is the order in which a stage runs the forward and backward halves of its
// micro-batches.
type Schedule int

// The schedules.
const (
	// GPipe runs every forward, then every backward: simple, and it holds the activations
	// of all B micro-batches at once.
	GPipe Schedule = iota
	// OneFOneB is PipeDream-flush: stage i of S warms up with S−1−i forwards, then
	// alternates one forward and one backward, then drains the backwards. It holds at most
	// S−i micro-batches' activations.
	OneFOneB
)

func (s Schedule) String() string {
	switch s {
	case GPipe:
		return "gpipe"
	case OneFOneB:
		return "1f1b"
	}
	return fmt.Sprintf("schedule(%d)", int(s))
}

// ParseSchedule reads the name String writes.
func ParseSchedule(name string) (Schedule, error) {
	switch name {
	case "gpipe":
		return GPipe, nil
	case "1f1b":
		return OneFOneB, nil
	}
	return 0, fmt.Errorf("codegen: unknown schedule %q, expected gpipe or 1f1b", name)
}

// Plan is everything Lower needs to emit one Program per device: the step graph of one
// micro-batch, how many micro-batches make the step, the pipeline schedule, and for every
// stage its mesh and the layout of every value and operand.
type Plan struct {
	// Step is the training step of ONE micro-batch: forward, loss, backward and update, as
	// passes.TrainingStep makes it from passes.Rebatch(fwd, batch/B). Its first output is
	// the loss; the gradient of param p is the value autodiff marked so (Step.GradOf(p)).
	Step         *ir.Graph
	Microbatches int
	Schedule     Schedule
	Stages       []Stage
	// StageOf gives, per ir.ValueID of Step, the stage that computes it (for params and
	// state: the stage that holds and updates it).
	StageOf []StageID
}

// Stage is one pipeline stage: a logical mesh and the layouts its values live in.
type Stage struct {
	// Mesh holds the stage's devices (global DeviceIDs, disjoint from every other stage's).
	Mesh *mesh.LogicalMesh
	// Out is the layout each value of this stage is produced in (a leaf: stored in). It may
	// be partial on the axes of a split contracted dim.
	Out map[ir.ValueID]mesh.Spec
	// In is, per op of this stage, the layout each operand must have when the op runs on
	// local shards: the op's strategy. See CheckStrategy for the contract.
	In map[ir.ValueID][]mesh.Spec
}

// Devices lists every device of the plan, stage by stage, in mesh order: the order of the
// programs Lower returns.
func (p *Plan) Devices() []DeviceID {
	var out []DeviceID
	for _, s := range p.Stages {
		out = append(out, s.Mesh.Devices...)
	}
	return out
}
