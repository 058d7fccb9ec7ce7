package autopar

import (
	"fmt"
	"io"
	"time"

	"github.com/autopar/autopar/codegen"
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
	// priced holds, per stage, the sharding compile priced it with; nil in a plan read back.
	priced []pricedStage
}

// pricedStage is one stage's sharding as compile priced it.
type pricedStage struct {
	sg  *stageGraph
	res *sharding.Result
}

// pricedCollective is one collective a compiled plan prices: run by every device of its
// stage, once per micro-batch or (PerStep) once per step.
type pricedCollective struct {
	Stage   int
	Kind    mesh.Collective
	Bytes   float64 // B of the alpha–beta formulas: the tensor as one group holds it
	PerStep bool
	Value   string // the value it moves
}

// pricedCollectives lists the collectives the plan's prices count, in stage order; nil for a
// plan read back from plan.json (its sharding results are not kept there).
func (p *Plan) pricedCollectives() []pricedCollective {
	var out []pricedCollective
	for si, ps := range p.priced {
		for _, c := range ps.res.Collectives {
			if c.Kind == mesh.Slice {
				continue // local: no communication
			}
			out = append(out, pricedCollective{Stage: si, Kind: c.Kind, Bytes: c.Bytes, PerStep: ps.sg.perStep(c),
				Value: ps.sg.g.Value(c.Value).Name})
		}
	}
	return out
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
	return &Plan{Plan: *p}, nil
}

// assemble turns the DP's result into a Plan.
func assemble(g, step *ir.Graph, lay *passes.Layering, c *mesh.Cluster, opts Options, sched program.Schedule,
	batch, b int, res *dp.Result, o *oracle) (*Plan, error) {
	text := g.String()
	p := &Plan{Plan: plan.Plan{Version: PlanVersion, Model: g.Name, ModelHash: plan.HashText(text), ModelIR: text, Cluster: *c,
		Batch: batch, Microbatches: b, Schedule: sched.String(), Optimizer: plan.SpecOf(opts.Optimizer)}}
	fwd, err := forwardFor(g, opts.BatchNorm, b)
	if err != nil {
		return nil, err
	}
	if fwd != g && fwd.String() != text { // some statistics are per micro-batch
		p.BatchNorm = plan.BatchNormMicrobatch
	}
	p.AttachGraphs(fwd, step)
	if opts.Manual != nil {
		p.Manual = opts.Manual.String()
	}
	p.ILPTimeLimit = opts.ILPTimeLimit.Seconds()
	p.ILPIterations = opts.ILPIterations
	p.LPSolveOnly = opts.LPSolveOnly
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
		p.priced = append(p.priced, pricedStage{sg, sol.res})
	}
	if !res.Placed {
		p.placeByTransfers() // the DP did not place them (dp.Result.Placed)
	}
	p.priceTransfers()
	predict(&p.Plan, step, c)
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
	// The search's price of the stage holds its estimate of the stage's receives
	// (oracle.recvEstimate); the plan's Time is the stage's own, its receives priced apart
	// (priceTransfers).
	own := sol.chosen(choice(st.Cost.Recompute, st.Cost.Checkpoints))
	s := Stage{FirstLayer: st.Start, LastLayer: st.End - 1,
		Submesh: st.Submesh,
		Logical: st.Logical, Devices: st.Devices, Time: own.Time,
		StepTime: st.Cost.Step, StepComm: sol.stepComm, Cost: costOf(sol.res.Cost), WeightBytes: int64(st.Cost.WeightBytes), ActBytes: int64(st.Cost.ActBytes),
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

// predict composes the plan's step from its stages as the search does (dp: Σ t + (B−1)·max
// t + the first stage's step part), with each stage's receives (RecvTime, StepRecvTime) on
// its path; see plan.Prediction.
func predict(p *plan.Plan, step *ir.Graph, c *mesh.Cluster) {
	B := float64(p.Microbatches)
	slow := 0
	path := func(s *plan.Stage) float64 { return s.Time + s.RecvTime }
	for i := range p.Stages {
		if path(&p.Stages[i]) > path(&p.Stages[slow]) {
			slow = i
		}
	}
	compute, comm := p.Stages[slow].MicrobatchSplit()
	pr := &p.Predicted
	pr.Communication = B * comm
	pr.Compute = B * compute
	pr.Sync = p.Stages[0].StepComm
	pr.Update = max(0, p.Stages[0].StepTime-pr.Sync)
	pr.Bubble, pr.SendRecv = 0, B*p.Stages[slow].RecvTime+p.Stages[0].StepRecvTime
	for i, s := range p.Stages {
		if i != slow {
			pr.Bubble += s.Time
			pr.SendRecv += s.RecvTime
		}
	}
	pr.StepTime = pr.Compute + pr.Communication + pr.Bubble + pr.Sync + pr.Update + pr.SendRecv
	pr.FLOPs = step.TotalFLOPs() * B
	if pr.StepTime > 0 {
		pr.SamplesPerSecond = float64(p.Batch) / pr.StepTime
		perDevice := pr.FLOPs / pr.StepTime / float64(c.Devices())
		pr.TFLOPSPerDevice = perDevice / 1e12
		pr.MFU = perDevice / c.DeviceFLOPS
	}
}

// priceTransfers fills each stage's Sent and Received from codegen.Transfers, and prices
// what it receives: RecvTime per micro-batch, StepRecvTime once per step. Each piece a
// device receives costs the cluster's point-to-point time between the two stages' meshes
// (mesh.Cluster.SendRecvCost); a device receives its pieces one after another, and the
// stage takes as long as its slowest device. A plan codegen refuses gets none: lowering
// it reports the error.
func (p *Plan) priceTransfers() {
	if len(p.Stages) < 2 {
		return
	}
	cp, err := p.CodegenPlan()
	if err != nil {
		return
	}
	ts, err := codegen.Transfers(cp)
	if err != nil {
		return
	}
	recv := make([][2][]float64, len(p.Stages)) // per stage, per micro-batch and per step: per device
	for i := range p.Stages {
		p.Stages[i].Sent, p.Stages[i].Received = &plan.Transfers{}, &plan.Transfers{}
		n := len(p.Stages[i].Devices)
		recv[i] = [2][]float64{make([]float64, n), make([]float64, n)}
	}
	for _, t := range ts {
		k := 0
		for _, x := range []*plan.Transfers{p.Stages[t.From].Sent, p.Stages[t.To].Received} {
			if t.PerStep {
				x.StepPieces += t.Pieces
				x.StepBytes += t.Bytes
				k = 1
			} else {
				x.Pieces += t.Pieces
				x.Bytes += t.Bytes
			}
		}
		from, to := cp.Stages[t.From].Mesh, cp.Stages[t.To].Mesh
		for d, pieces := range t.Received {
			for _, b := range pieces {
				recv[t.To][k][d] += p.Cluster.SendRecvCost(from, to, float64(b))
			}
		}
	}
	for i := range p.Stages {
		for _, x := range recv[i][0] {
			p.Stages[i].RecvTime = max(p.Stages[i].RecvTime, x)
		}
		for _, x := range recv[i][1] {
			p.Stages[i].StepRecvTime = max(p.Stages[i].StepRecvTime, x)
		}
	}
}

// placeByTransfers re-places the stages (dp.PlaceBy) of a plan the DP did not place (its
// receives priced unplaced: no sequence of stages that fits lies on its ring, or the
// stages were pinned so) so that the stages smaller than a host
// that share one are those that pass the most between them: a pair's weight is the bytes
// its transfers (codegen.Transfers) land on the receiving stage's busiest device, per
// micro-batch transfers counted Microbatches times. The transfers' pieces do not depend on
// the devices, only on the stages' meshes and specs, and each stage's devices are rebuilt
// from its new first device, so codegen emits what priceTransfers then prices. A plan
// codegen refuses keeps dp's placement.
func (p *Plan) placeByTransfers() {
	dpc := dp.Cluster{Hosts: p.Cluster.Hosts, DevicesPerHost: p.Cluster.DevicesPerHost}
	small := 0
	for _, s := range p.Stages {
		if s.Submesh.NumDevices() < dpc.DevicesPerHost {
			small++
		}
	}
	if small < 3 {
		return // at most one packing
	}
	cp, err := p.CodegenPlan()
	if err != nil {
		return
	}
	ts, err := codegen.Transfers(cp)
	if err != nil {
		return
	}
	n := len(p.Stages)
	w := make([]float64, n*n)
	for _, t := range ts {
		most := int64(0)
		for _, pieces := range t.Received {
			b := int64(0)
			for _, x := range pieces {
				b += x
			}
			most = max(most, b)
		}
		x := float64(most)
		if !t.PerStep {
			x *= float64(p.Microbatches)
		}
		w[int(t.From)*n+int(t.To)] += x
		w[int(t.To)*n+int(t.From)] += x
	}
	stages := make([]dp.Stage, n)
	for i, s := range p.Stages {
		stages[i] = dp.Stage{Submesh: s.Submesh}
	}
	dp.PlaceBy(dpc, stages, func(a, b int) float64 { return w[a*n+b] })
	for i := range p.Stages {
		p.Stages[i].Devices = stages[i].Devices
	}
}

// costOf is the sharding pass's cost as plan.json spells it.
func costOf(c sharding.Cost) plan.Cost {
	return plan.Cost{Compute: c.Compute, Communication: c.Communication, Resharding: c.Resharding, Data: c.Data, Total: c.Total}
}

// ilpStatsOf is the sharding ILP's statistics as plan.json spells them.
func ilpStatsOf(s sharding.ILPStats) plan.ILPStats {
	return plan.ILPStats{Values: s.Values, Nodes: s.Nodes, Variables: s.Variables, EdgeVars: s.EdgeVars, Rows: s.Rows,
		MemoryRows: s.MemoryRows, TiedGroups: s.TiedGroups, Rounds: s.Rounds, SharedValues: s.SharedValues,
		PerEdgeValues: s.PerEdgeValues, Status: s.Status, Objective: s.Objective, SolveTime: s.SolveTime}
}

// ilpIterations is the iteration limit the plan's sharding solves ran under (< 0: none).
func (p *Plan) ilpIterations() int64 {
	if p.ILPIterations == 0 {
		return Options{}.withDefaults().ILPIterations
	}
	return p.ILPIterations
}

// ilpTimeLimit is the time limit the plan's sharding solves ran under.
func (p *Plan) ilpTimeLimit() time.Duration {
	if p.ILPTimeLimit <= 0 {
		return Options{}.withDefaults().ILPTimeLimit
	}
	return time.Duration(p.ILPTimeLimit * float64(time.Second))
}
