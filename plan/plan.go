package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
)

// PlanVersion is the version of the plan.json format.
const PlanVersion = 1

// Plan is a compiled training plan: what plan.json holds. It is plain data, written and
// read back byte for byte; Programs lowers it to one program per device.
type Plan struct {
	Version      int          `json:"version"`
	Model        string       `json:"model"`
	ModelHash    string       `json:"model_hash"` // sha256 of ModelIR
	ModelIR      string       `json:"model_ir"`   // the forward graph, so the plan stands alone
	Cluster      mesh.Cluster `json:"cluster"`
	Batch        int          `json:"batch"`
	Microbatches int          `json:"microbatches"`
	// BatchNorm is "microbatch" when batch_norm's statistics run over each micro-batch
	// (passes.PerMicrobatchStats; the compiler's Options.BatchNorm), "" when over the step's
	// batch, as the model says.
	BatchNorm    string        `json:"batch_norm,omitempty"`
	Schedule     string        `json:"schedule"`
	Optimizer    OptimizerSpec `json:"optimizer"`
	Manual       string        `json:"manual,omitempty"` // the tp/pp/dp degrees it was forced to
	ILPTimeLimit float64       `json:"ilp_time_limit_s"` // each sharding solve's, so explain can redo them
	// ILPIterations is each sharding solve's limit on simplex iterations (negative: none;
	// 0, in plans written before it was recorded: the compiler's default).
	ILPIterations int64 `json:"ilp_iterations,omitempty"`
	// LPSolveOnly says every sharding solve went to lp_solve, without the
	// message-passing certificate first (autopar.Options.LPSolveOnly).
	LPSolveOnly bool       `json:"lp_solve_only,omitempty"`
	Layers      []Layer    `json:"layers"`
	Stages      []Stage    `json:"stages"`
	Predicted   Prediction `json:"predicted"`

	model *ir.Graph // the forward graph
	step  *ir.Graph // the training step of one micro-batch
}

// OptimizerSpec is passes.Optimizer as plan.json spells it.
type OptimizerSpec struct {
	Kind        string  `json:"kind"`
	LR          float64 `json:"lr"`
	Momentum    float64 `json:"momentum,omitempty"`
	Beta1       float64 `json:"beta1,omitempty"`
	Beta2       float64 `json:"beta2,omitempty"`
	Eps         float64 `json:"eps,omitempty"`
	WeightDecay float64 `json:"weight_decay,omitempty"`
	Precision   string  `json:"precision,omitempty"` // passes.ParsePrecision's name; "" the model's dtypes
	LossScale   float64 `json:"loss_scale,omitempty"`
}

// Optimizer is the spec as the passes take it.
func (o OptimizerSpec) Optimizer() passes.Optimizer {
	return passes.Optimizer{Kind: o.Kind, LR: o.LR, Momentum: o.Momentum, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Precision: o.Precision, LossScale: o.LossScale}
}

// SpecOf is o as plan.json spells it.
func SpecOf(o passes.Optimizer) OptimizerSpec {
	return OptimizerSpec{Kind: o.Kind, LR: o.LR, Momentum: o.Momentum, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, Precision: o.Precision, LossScale: o.LossScale}
}

// Layer is one layer of the clustering: its work and the activation bytes it receives.
type Layer struct {
	FLOPs   float64 `json:"flops"`
	InBytes int64   `json:"in_bytes"`
}

// Stage is one pipeline stage of a plan.
type Stage struct {
	FirstLayer int               `json:"first_layer"`
	LastLayer  int               `json:"last_layer"`
	Submesh    mesh.Submesh      `json:"submesh"`
	Logical    mesh.LogicalShape `json:"logical_mesh"` // (dp, mp)
	Devices    []int             `json:"devices"`
	Time       float64           `json:"time"` // seconds per micro-batch, forward + backward
	// StepTime is seconds once per step, after the stage's last backward: the gradient sync
	// (StepComm of it: the collectives that resolve the accumulated gradients and reshard
	// them for the update) and the optimizer update. Cost.Total = Time + StepTime, less
	// any recomputation in Time.
	StepTime    float64 `json:"step_time"`
	StepComm    float64 `json:"step_communication"`
	Cost        Cost    `json:"cost"`
	WeightBytes int64   `json:"weight_bytes"`
	ActBytes    int64   `json:"activation_bytes"`
	InFlight    int     `json:"in_flight"`
	// Recompute is set when the stage recomputes its activations in the backward: then
	// ActBytes is what it keeps per micro-batch in flight (its inputs; with
	// RecomputeLayers, each layer's input too, and it recomputes one layer at a time),
	// and RecomputeBytes the activations of the micro-batch whose backward runs.
	// MemoryBytes = WeightBytes + InFlight·ActBytes + RecomputeBytes.
	Recompute       bool  `json:"recompute,omitempty"`
	RecomputeLayers bool  `json:"recompute_layers,omitempty"`
	RecomputeBytes  int64 `json:"recompute_bytes,omitempty"`
	MemoryBytes     int64 `json:"memory_bytes"` // per device at the peak
	// Sent and Received are the stage's cross-stage transfers (codegen.Transfers), absent
	// in a one-stage plan.
	Sent     *Transfers `json:"sent,omitempty"`
	Received *Transfers `json:"received,omitempty"`
	// RecvTime is the seconds per micro-batch the stage spends receiving Received's
	// per-micro-batch pieces (forward activations, backward gradients), and StepRecvTime
	// the seconds once per step receiving its step pieces: each piece priced by the
	// cluster's point-to-point cost (mesh.Cluster.SendRecvCost) between the two stages'
	// meshes, a device's pieces one after another, the slowest device's sum. Sends return
	// at once (the runtime's transports buffer them), so a transfer is on the receiver's
	// path. Not in Time or StepTime.
	RecvTime     float64     `json:"recv_time,omitempty"`
	StepRecvTime float64     `json:"step_recv_time,omitempty"`
	ILP          ILPStats    `json:"ilp"` // SolveTime zeroed: plan.json is deterministic
	Values       []ValuePlan `json:"values"`
}

// Transfers counts the point-to-point pieces a stage sends or receives between pipeline
// stages, over all its devices: per micro-batch, and once per step (the new values of
// params another stage loads, what the update sends). The receiving stage's RecvTime and
// StepRecvTime price them.
type Transfers struct {
	Pieces     int   `json:"pieces"`
	Bytes      int64 `json:"bytes"`
	StepPieces int   `json:"step_pieces,omitempty"`
	StepBytes  int64 `json:"step_bytes,omitempty"`
}

// Cost is a stage's sharding cost per micro-batch, in seconds: plan.json's copy of
// sharding.Cost, with its own fields so that renaming one in the sharding pass cannot
// change the file format.
type Cost struct {
	Compute       float64 `json:"compute"`
	Communication float64 `json:"communication"` // op-internal collectives
	Resharding    float64 `json:"resharding"`
	// Data is the loads, stores, constants and gradient accumulation around the ops'
	// kernels (absent: none priced, as in plans written before they were).
	Data  float64 `json:"data,omitempty"`
	Total float64 `json:"total"`
}

// ILPStats describes the integer program a stage's sharding solved: plan.json's copy of
// sharding.ILPStats.
type ILPStats struct {
	Values     int `json:"values"`
	Nodes      int `json:"nodes"` // groups after merging followers
	Variables  int `json:"variables"`
	EdgeVars   int `json:"edge_variables"`
	Rows       int `json:"rows"`
	MemoryRows int `json:"memory_rows"`
	TiedGroups int `json:"tied_groups"` // groups sharing another's variables
	Rounds     int `json:"rounds"`      // solves (memory rows are added lazily)
	// SharedValues are values the ILP prices once per layout their consumers want;
	// PerEdgeValues those it prices once per consumer (too large to share; its objective
	// then may exceed Cost.Total).
	SharedValues  int           `json:"shared_values"`
	PerEdgeValues int           `json:"per_edge_values"`
	Status        string        `json:"status"`
	Objective     float64       `json:"objective"`
	SolveTime     time.Duration `json:"solve_time_ns"` // 0 in plan.json
}

// ValuePlan is the sharding of one value of a stage.
type ValuePlan struct {
	Name     string      `json:"name"`
	Op       string      `json:"op"`
	Layer    int         `json:"layer"` // of the clustering; leaves: of their first user
	Spec     mesh.Spec   `json:"spec"`
	In       []mesh.Spec `json:"in,omitempty"`
	Strategy string      `json:"strategy,omitempty"`
	Compute  float64     `json:"compute,omitempty"`
	Comm     float64     `json:"comm,omitempty"`
}

// Prediction is what the plan predicts for one training step. StepTime = Compute +
// Communication + Bubble + Sync + Update + SendRecv, where Compute and Communication are
// the B micro-batches of the slowest stage (by Time + RecvTime), Bubble the rest of the
// pipeline's fill and drain (the other stages' Time), Sync and Update the first stage's
// once-per-step part (its gradient sync and optimizer update), which ends the step: the
// first stage runs the step's last backward; and SendRecv the transfers between stages on
// that path: the slowest stage's RecvTime B times, every other stage's once (the fill and
// drain of one micro-batch crosses every boundary, forward and backward), and the first
// stage's StepRecvTime. That is Σ (tᵢ + rᵢ) + (B−1)·max (tⱼ + rⱼ) + u₀ + s₀, with tᵢ
// a stage's Time, rᵢ its RecvTime, u₀ and s₀ the first stage's StepTime and StepRecvTime.
type Prediction struct {
	StepTime         float64 `json:"step_time"`
	Compute          float64 `json:"compute"`
	Communication    float64 `json:"communication"`
	Bubble           float64 `json:"bubble"`
	Sync             float64 `json:"gradient_sync"`
	Update           float64 `json:"update"`
	SendRecv         float64 `json:"send_recv,omitempty"`
	FLOPs            float64 `json:"flops"` // per step, forward + backward + update
	SamplesPerSecond float64 `json:"samples_per_second"`
	TFLOPSPerDevice  float64 `json:"tflops_per_device"`
	MFU              float64 `json:"mfu"`
	DeviceMemory     int64   `json:"device_memory"` // capacity per device
	Solves           int     `json:"ilp_solves"`
}

// ModelHash identifies a forward graph: the sha256 of its .ir text.
func ModelHash(g *ir.Graph) string { return HashText(g.String()) }

// HashText is the sha256 of s in hex: ModelHash of a graph whose text is s.
func HashText(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// WriteJSON writes plan.json: indented, fields in a fixed order, so the same plan gives
// the same bytes.
func (p *Plan) WriteJSON(w io.Writer) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// MaxPlanBytes bounds the plan.json ReadPlan reads; a plan of the largest zoo model is a
// few MiB. Raise it here for a bigger one.
const MaxPlanBytes = 256 << 20

// ReadPlan reads a plan.json. The plan carries its model, so nothing else is needed. It
// checks the plan's meaning as well as its syntax: a corrupt file, another format version,
// a model text that does not match its hash, stages that overlap, run layers out of order
// or share a device, an unknown schedule, negative predictions, an in-flight count the
// schedule does not imply, a layout no device can hold, or a stage assignment codegen
// refuses are errors saying so. A plan ReadPlan returns lowers (Programs).
func ReadPlan(r io.Reader) (*Plan, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxPlanBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxPlanBytes {
		return nil, fmt.Errorf("plan: larger than %d MiB (plan.MaxPlanBytes), expected a plan.json", MaxPlanBytes>>20)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("plan: the file is empty, expected a plan.json written by autopar compile -o DIR")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("plan: corrupt plan.json: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("plan: corrupt plan.json: data after the plan's JSON object")
	}
	if p.Version != PlanVersion {
		return nil, fmt.Errorf("plan: version %d, this autopar reads version %d", p.Version, PlanVersion)
	}
	if err := p.checkMeaning(); err != nil {
		return nil, err
	}
	if HashText(p.ModelIR) != p.ModelHash {
		return nil, fmt.Errorf("plan: corrupt plan.json: the model text does not match its hash %.12s", p.ModelHash)
	}
	model, err := frontend.Parse("plan.json:model_ir", []byte(p.ModelIR))
	if err != nil {
		return nil, fmt.Errorf("plan: corrupt plan.json: %w", err)
	}
	if err := p.rebuild(model); err != nil {
		return nil, err
	}
	return &p, nil
}

// ReadPlanFile reads the plan.json at path.
func ReadPlanFile(path string) (*Plan, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := ReadPlan(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// CheckModel returns an error unless the plan was compiled for forward graph g.
func (p *Plan) CheckModel(g *ir.Graph) error {
	h := ModelHash(g)
	if h == p.ModelHash {
		return nil
	}
	if b, err := passes.BatchSize(g); err == nil && b != p.Batch && g.Name == p.Model {
		return fmt.Errorf("plan: the plan was compiled for model %s with batch %d, not batch %d", p.Model, p.Batch, b)
	}
	return fmt.Errorf("plan: the plan belongs to model %s (hash %.12s), not to %s (hash %.12s)",
		p.Model, p.ModelHash, g.Name, h)
}

// CheckCluster returns an error unless the plan was compiled for cluster c, naming the
// first field of the spec that differs.
func (p *Plan) CheckCluster(c *mesh.Cluster) error {
	if d := clusterDiff(&p.Cluster, c); d != "" {
		return fmt.Errorf("plan: the plan was compiled for cluster %s, not for %s: %s", p.Cluster.String(), c.String(), d)
	}
	return nil
}

// AttachGraphs gives a plan the compiler just made the forward graph it computes (Computed)
// and the training step of one micro-batch it sharded (ReadPlan rebuilds them from ModelIR
// instead).
func (p *Plan) AttachGraphs(model, step *ir.Graph) { p.model, p.step = model, step }

// Forward returns the forward graph the plan computes: the model it was compiled from
// (ModelIR), with its batch norms' statistics per micro-batch under BatchNorm
// "microbatch". Its training step, run serially, is the reference the plan's programs
// equal.
func (p *Plan) Forward() *ir.Graph { return p.model }

// BatchNormMicrobatch is Plan.BatchNorm for statistics per micro-batch.
const BatchNormMicrobatch = "microbatch"

// Computed returns the forward graph a plan of model in b micro-batches computes under
// batch-norm mode bn ("" or "step": model itself; "microbatch": its batch norms' statistics
// per micro-batch, passes.PerMicrobatchStats), after checking that the micro-batches do not
// change it (passes.BatchCoupled).
func Computed(model *ir.Graph, bn string, b int) (*ir.Graph, error) {
	f := model
	if bn == BatchNormMicrobatch {
		var err error
		if f, err = passes.PerMicrobatchStats(model, b); err != nil {
			return nil, err
		}
	}
	if id, ok := passes.BatchCoupled(f, b); ok {
		v := f.Value(id)
		return nil, ir.Errorf(v.Pos, "%d micro-batches would change what %s (%s) computes: it couples the samples of the batch", b, v.Name, v.Op)
	}
	return f, nil
}

// rebuild recomputes the micro-batch step the plan was made for and checks the plan's
// values against it.
func (p *Plan) rebuild(model *ir.Graph) error {
	batch, err := passes.BatchSize(model)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if batch != p.Batch {
		return fmt.Errorf("plan: batch %d, but its model %s has batch %d", p.Batch, model.Name, batch)
	}
	fwd, err := Computed(model, p.BatchNorm, p.Microbatches)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	mb, err := passes.Rebatch(fwd, p.Batch/p.Microbatches)
	if err != nil {
		return err
	}
	step, err := passes.TrainingStep(mb, p.Optimizer.Optimizer())
	if err != nil {
		return err
	}
	for _, s := range p.Stages {
		for _, v := range s.Values {
			id, ok := step.Lookup(v.Name)
			if !ok || step.Value(id).Op.String() != v.Op {
				return fmt.Errorf("plan: value %s (%s) of the plan is not in the training step of %s", v.Name, v.Op, model.Name)
			}
		}
	}
	p.model, p.step = fwd, step
	return p.checkStep()
}

// Step returns the training step of one micro-batch the plan shards.
func (p *Plan) Step() *ir.Graph { return p.step }

// Programs lowers the plan to one program per device (codegen.Lower).
func (p *Plan) Programs() ([]*program.Program, error) {
	cp, err := p.CodegenPlan()
	if err != nil {
		return nil, err
	}
	return codegen.Lower(cp)
}

// CodegenPlan is the plan as codegen reads it: ValueIDs of the step instead of names.
func (p *Plan) CodegenPlan() (*codegen.Plan, error) {
	if p.step == nil {
		return nil, fmt.Errorf("plan: no training step: read the plan with ReadPlan")
	}
	sched, err := program.ParseSchedule(p.Schedule)
	if err != nil {
		return nil, err
	}
	step := p.step
	cp := &codegen.Plan{Step: step, Microbatches: p.Microbatches, Schedule: sched,
		StageOf: make([]codegen.StageID, len(step.Values))}
	owner := make([]int, len(step.Values))
	for i := range owner {
		owner[i] = -1
	}
	for si, s := range p.Stages {
		for _, v := range s.Values {
			if id, _ := step.Lookup(v.Name); owner[id] < 0 {
				owner[id] = si // the first stage to list a leaf holds and updates it
			}
		}
	}
	for si, s := range p.Stages {
		lm, err := mesh.NewLogicalMeshAt(&p.Cluster, s.Submesh, mesh.DeviceID(s.Devices[0]), s.Logical[0], s.Logical[1])
		if err != nil {
			return nil, fmt.Errorf("plan: stage %d: %w", si, err)
		}
		st := codegen.Stage{Mesh: lm, Out: map[ir.ValueID]mesh.Spec{}, In: map[ir.ValueID][]mesh.Spec{}, Recompute: s.Recompute,
			Resolved: map[ir.ValueID]mesh.Spec{}}
		if s.RecomputeLayers {
			st.Segment = map[ir.ValueID]int{}
		}
		for _, v := range s.Values {
			id, _ := step.Lookup(v.Name)
			if owner[id] != si {
				continue
			}
			st.Out[id] = LocalOut(step, id, v.In, v.Spec)
			if st.Out[id].Partial != 0 {
				st.Resolved[id] = v.Spec // the op's own collectives leave its sharding's layout
			}
			if len(v.In) > 0 {
				st.In[id] = v.In
			}
			if st.Segment != nil {
				st.Segment[id] = v.Layer
			}
		}
		cp.Stages = append(cp.Stages, st)
	}
	for i := range owner {
		if owner[i] < 0 {
			owner[i] = 0 // a value no stage lists (dead code): stage 0 holds it
		}
		cp.StageOf[i] = codegen.StageID(owner[i])
	}
	return cp, nil
}

// StageNames lists the values of every stage, sorted, for error messages that must name
// what exists.
func (p *Plan) StageNames() []string {
	var names []string
	for _, s := range p.Stages {
		for _, v := range s.Values {
			names = append(names, v.Name)
		}
	}
	sort.Strings(names)
	return names
}

// MicrobatchSplit splits the stage's time per micro-batch into compute and communication
// (op collectives and resharding): its sharding cost less the step part.
func (s *Stage) MicrobatchSplit() (compute, comm float64) {
	comm = max(0, s.Cost.Communication+s.Cost.Resharding-s.StepComm)
	comm = min(comm, s.Time)
	return s.Time - comm, comm
}
