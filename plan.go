package autopar

import (
	"fmt"
	"io"
	"time"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/program"
)

// Plan is a compiled training plan: plan.Plan (what plan.json holds, its checks and its
// lowering, in the data package that render, the runtime and the CLI import without the
// search) with the explanations that need the search (ExplainOp, ExplainStage, Export)
// added. It marshals to the same JSON as plan.Plan.
type Plan struct {
	plan.Plan
}

// The plan.json schema is package plan's; these names keep the root API.
type (
	OptimizerSpec = plan.OptimizerSpec
	Layer         = plan.Layer
	Stage         = plan.Stage
	ValuePlan     = plan.ValuePlan
	Prediction    = plan.Prediction
	DeviceMemory  = plan.DeviceMemory
)

// PlanVersion is the version of the plan.json format (plan.PlanVersion).
const PlanVersion = plan.PlanVersion

// MaxPlanBytes bounds the plan.json ReadPlan reads (plan.MaxPlanBytes).
const MaxPlanBytes = plan.MaxPlanBytes

// ModelHash identifies a forward graph: the sha256 of its .ir text.
func ModelHash(g *ir.Graph) string { return plan.ModelHash(g) }

// ReadPlan reads a plan.json and checks its meaning (plan.ReadPlan).
func ReadPlan(r io.Reader) (*Plan, error) { return wrap(plan.ReadPlan(r)) }

// ReadPlanFile reads the plan.json at path (plan.ReadPlanFile).
func ReadPlanFile(path string) (*Plan, error) { return wrap(plan.ReadPlanFile(path)) }

func wrap(p *plan.Plan, err error) (*Plan, error) {
	if err != nil {
		return nil, err
	}
	return &Plan{*p}, nil
}

// assemble turns the DP's result into a Plan.
func assemble(g, step *ir.Graph, lay *passes.Layering, c *mesh.Cluster, opts Options, sched program.Schedule,
	batch, b int, res *dp.Result, o *oracle) (*Plan, error) {
	text := g.String()
	p := &Plan{plan.Plan{Version: PlanVersion, Model: g.Name, ModelHash: plan.HashText(text), ModelIR: text, Cluster: *c,
		Batch: batch, Microbatches: b, Schedule: sched.String(), Optimizer: plan.SpecOf(opts.Optimizer)}}
	p.AttachGraphs(g, step)
	if opts.Manual != nil {
		p.Manual = opts.Manual.String()
	}
	p.ILPTimeLimit = opts.ILPTimeLimit.Seconds()
	for l := range lay.L {
		p.Layers = append(p.Layers, Layer{FLOPs: lay.FLOPs[l], InBytes: lay.InBytes[l]})
	}
	for _, st := range res.Stages {
		sol := o.solve(st.Start, st.End, st.Submesh, st.Logical)
		sg, err := o.stage(st.Start, st.End)
		if err != nil || !sol.ok || sol.res == nil {
			return nil, fmt.Errorf("compile: stage %d-%d lost its sharding: %v", st.Start, st.End-1, err)
		}
		p.Stages = append(p.Stages, stagePlan(step, lay, st, sg, sol))
	}
	predict(&p.Plan, res, step, c)
	p.Predicted.DeviceMemory = c.DeviceMemoryBytes
	if opts.MemoryPerDevice > 0 {
		p.Predicted.DeviceMemory = opts.MemoryPerDevice
	}
	p.Predicted.Solves = int(o.solves.Load())
	return p, nil
}

// stagePlan lists the stage's values with their specs: its ops, and the leaves it reads.
// Values other stages send it are left out: the consumers' In specs say how they arrive.
func stagePlan(step *ir.Graph, lay *passes.Layering, st dp.Stage, sg *stageGraph, sol *stageSolution) Stage {
	s := Stage{FirstLayer: st.Start, LastLayer: st.End - 1,
		Submesh: mesh.Submesh{Hosts: st.Submesh.Hosts, Devices: st.Submesh.Devices},
		Logical: [2]int{st.Logical.DP, st.Logical.MP}, Devices: st.Devices, Time: st.Cost.Time,
		Cost: costOf(sol.res.Cost), WeightBytes: int64(st.Cost.WeightBytes), ActBytes: int64(st.Cost.ActBytes),
		InFlight: st.InFlight, MemoryBytes: int64(st.Memory), ILP: ilpStatsOf(sol.res.ILP),
		Recompute: st.Cost.Recompute, RecomputeLayers: st.Cost.Checkpoints, RecomputeBytes: int64(st.Cost.OnceBytes)}
	s.ILP.SolveTime = 0
	for i := range sg.g.Values {
		v := &sg.g.Values[i]
		id, ok := step.Lookup(v.Name)
		if !ok || step.Value(id).Op != v.Op {
			continue // arrives from another stage
		}
		strat := sol.res.Strategies[i]
		s.Values = append(s.Values, ValuePlan{Name: v.Name, Op: v.Op.String(), Layer: lay.Of[id], Spec: sol.res.Specs[i],
			In: strat.In, Strategy: strat.Name, Compute: strat.Compute, Comm: strat.Comm})
	}
	return s
}

func predict(p *plan.Plan, res *dp.Result, step *ir.Graph, c *mesh.Cluster) {
	B := float64(p.Microbatches)
	slow := 0
	for i, st := range p.Stages {
		if st.Time > p.Stages[slow].Time {
			slow = i
		}
	}
	s := p.Stages[slow]
	comm := s.Cost.Communication + s.Cost.Resharding
	frac := 0.0
	if s.Cost.Total > 0 {
		frac = comm / s.Cost.Total
	}
	pr := &p.Predicted
	pr.StepTime = res.Time
	pr.Communication = B * s.Time * frac
	pr.Compute = B*s.Time - pr.Communication
	pr.Bubble = res.Time - B*s.Time
	pr.FLOPs = step.TotalFLOPs() * B
	if res.Time > 0 {
		pr.SamplesPerSecond = float64(p.Batch) / res.Time
		perDevice := pr.FLOPs / res.Time / float64(c.Devices())
		pr.TFLOPSPerDevice = perDevice / 1e12
		pr.MFU = perDevice / c.DeviceFLOPS
	}
}

// costOf is the sharding pass's cost as plan.json spells it.
func costOf(c sharding.Cost) plan.Cost {
	return plan.Cost{Compute: c.Compute, Communication: c.Communication, Resharding: c.Resharding, Total: c.Total}
}

// ilpStatsOf is the sharding ILP's statistics as plan.json spells them.
func ilpStatsOf(s sharding.ILPStats) plan.ILPStats {
	return plan.ILPStats{Values: s.Values, Nodes: s.Nodes, Variables: s.Variables, EdgeVars: s.EdgeVars, Rows: s.Rows,
		MemoryRows: s.MemoryRows, TiedGroups: s.TiedGroups, Rounds: s.Rounds, Status: s.Status, Objective: s.Objective,
		SolveTime: s.SolveTime}
}

// ilpTimeLimit is the time limit the plan's sharding solves ran under.
func (p *Plan) ilpTimeLimit() time.Duration {
	if p.ILPTimeLimit <= 0 {
		return Options{}.withDefaults().ILPTimeLimit
	}
	return time.Duration(p.ILPTimeLimit * float64(time.Second))
}
