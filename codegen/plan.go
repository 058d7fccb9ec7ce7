package codegen

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// StageID numbers a pipeline stage of a Plan: Plan.Stages[id].
type StageID int

// Plan is everything Lower needs to emit one Program per device: the step graph of one
// micro-batch, how many micro-batches make the step, the pipeline schedule, and for every
// stage its mesh and the layout of every value and operand.
type Plan struct {
	// Step is the training step of ONE micro-batch: forward, loss, backward and update, as
	// passes.TrainingStep makes it from passes.Rebatch(fwd, batch/B). Its first output is
	// the loss; the gradient of param p is the value autodiff marked so (Step.GradOf(p)).
	Step         *ir.Graph
	Microbatches int
	Schedule     program.Schedule
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
	// Resolved is, per op whose Out is partial, the layout its own collectives (the
	// all-reduce or reduce-scatter the sharding pass priced with the op) leave: its partial
	// sums are resolved into it once, and every consumer, send and store is made from it,
	// as the plan prices them. Absent, each is made from the partial layout directly, by
	// the cheapest collectives mesh.ReshardCost finds.
	Resolved map[ir.ValueID]mesh.Spec
	// Recompute makes the stage keep only its inputs from the forward of a micro-batch to
	// its backward, and run the forward ops the backward needs again in the backward
	// (activation recomputation; see remat.go).
	Recompute bool
	// Segment, under Recompute, numbers the recomputation segment of each forward op of
	// the stage (its layer, say; absent: 0): the forward also keeps every value an op of
	// another segment reads (a checkpoint), and the backward recomputes a segment just
	// before the first backward op that needs it, so it holds one segment's activations
	// at a time. Nil: the whole stage is one segment.
	Segment map[ir.ValueID]int
}

// Devices lists every device of the plan, stage by stage, in mesh order: the order of the
// programs Lower returns.
func (p *Plan) Devices() []program.DeviceID {
	var out []program.DeviceID
	for _, s := range p.Stages {
		out = append(out, s.Mesh.Devices...)
	}
	return out
}
