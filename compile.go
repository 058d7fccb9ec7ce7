package autopar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// Options steer Compile. The zero value compiles with SGD (momentum 0.9), micro-batches
// searched automatically, the 1F1B schedule and an automatic layer count.
type Options struct {
	// Optimizer is the update of the training step; the zero value is SGD with lr 0.1 and
	// momentum 0.9.
	Optimizer passes.Optimizer
	// Microbatches is B; 0 searches the divisors of the batch up to MaxAutoMicrobatches.
	// A model with an op that couples the samples of its batch (batch_norm) takes only 1.
	Microbatches int
	// Schedule is "1f1b" (default) or "gpipe".
	Schedule string
	// Layers is the number of layers the step is clustered into; 0 picks min(8, devices).
	Layers int
	// MemoryPerDevice overrides the cluster's device memory, in bytes; 0 keeps it.
	MemoryPerDevice int64
	// Manual, if set, fixes the plan to Megatron-style degrees, costed with the same model.
	Manual *Manual
	// From, if set, re-costs a saved plan: Compile refuses it unless it was compiled for the
	// same model and cluster (Plan.CheckFor), and pins its stages (ConstraintsOf), layer
	// count, micro-batch count and schedule, which replace Layers, Microbatches, Schedule,
	// Manual and Constraints.
	From *Plan
	// Constraints pin parts of the plan (stage boundaries, submeshes, logical meshes); the
	// rest is searched. Manual, when set, replaces them.
	Constraints dp.Constraints
	// ILPTimeLimit bounds each sharding ILP; 0 means 30 s.
	ILPTimeLimit time.Duration
	// Search is how stages are priced: "fast" (the default) solves each distinct layer
	// once per logical mesh and composes the price of a layer range from its layers'
	// solutions (compose.go), then solves the chosen stages exactly; "exhaustive" solves
	// one sharding ILP per (layer range, submesh, logical mesh), the reference.
	Search string
	// Progress, if set, is called as the search advances, with the micro-batch count being
	// tried and the phase: "sharding ILPs" (every stage priced, the long part) then "stage
	// search" (the DP). Calls come one at a time.
	Progress func(microbatches int, phase string, done, total int)
}

// MaxAutoMicrobatches bounds the micro-batch counts an automatic search tries.
const MaxAutoMicrobatches = 64

// Manual is a hand-written plan in Megatron's terms: TP-way tensor parallelism inside each
// stage, PP pipeline stages of equal layer counts, and DP-way data parallelism.
type Manual struct{ TP, PP, DP int }

// ParseManual reads "tp=8,pp=2,dp=32"; a degree left out is 1. Each degree is a positive
// decimal integer, given at most once, and their product (the devices the plan uses) is
// at most math.MaxInt32; anything else (tp=2xyz, tp=2.9, tp=2,tp=4, a trailing comma) is an
// error that quotes the value.
func ParseManual(s string) (*Manual, error) {
	m := &Manual{TP: 1, PP: 1, DP: 1}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		key, num, ok := strings.Cut(part, "=")
		var deg *int
		switch key {
		case "tp":
			deg = &m.TP
		case "pp":
			deg = &m.PP
		case "dp":
			deg = &m.DP
		default:
			if !ok {
				return nil, fmt.Errorf("plan %q: %q is not tp=N, pp=N or dp=N", s, part)
			}
			return nil, fmt.Errorf("plan %q: unknown degree %q, expected tp, pp or dp", s, key)
		}
		if seen[key] {
			return nil, fmt.Errorf("plan %q: %s is given twice", s, key)
		}
		seen[key] = true
		n, err := strconv.ParseInt(num, 10, 64)
		if ok && num != "" && num[0] >= '0' && num[0] <= '9' && (isRange(err) || err == nil && n > math.MaxInt32) {
			return nil, fmt.Errorf("plan %q: %s=%s is more than %d devices", s, key, num, math.MaxInt32)
		}
		if !ok || err != nil || n < 1 || num[0] < '0' || num[0] > '9' {
			return nil, fmt.Errorf("plan %q: %s=%q: expected a positive integer N, as in %s=2", s, key, num, key)
		}
		*deg = int(n)
	}
	if int64(m.TP)*int64(m.PP)*int64(m.DP) > math.MaxInt32 {
		return nil, fmt.Errorf("plan %q: tp×pp×dp is more than %d devices", s, math.MaxInt32)
	}
	return m, nil
}

func isRange(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}

// ConstraintsOf pins the stages of plan p: their layer ranges, submeshes and logical
// meshes, so that Compile re-costs a saved (or hand-edited) plan with the same model. Use it
// with Options.Layers = len(p.Layers) and Options.Microbatches = p.Microbatches.
func ConstraintsOf(p *Plan) dp.Constraints {
	var c dp.Constraints
	c.Boundaries = []int{0}
	for _, s := range p.Stages {
		c.Boundaries = append(c.Boundaries, s.LastLayer+1)
		c.StageSubmeshes = append(c.StageSubmeshes, dp.Submesh{Hosts: s.Submesh.Hosts, Devices: s.Submesh.Devices})
		c.StageLogicals = append(c.StageLogicals, dp.Logical{DP: s.Logical[0], MP: s.Logical[1]})
	}
	return c
}

func (m *Manual) String() string { return fmt.Sprintf("tp=%d,pp=%d,dp=%d", m.TP, m.PP, m.DP) }

// Compile plans the training of forward graph g (whose first output is a scalar loss that
// is a mean over the batch) on cluster c. It returns a *dp.MemoryError-wrapping error when
// no plan fits in device memory (naming the memory that would fit), and errors naming the
// option at fault for a batch the micro-batch count does not divide, a manual plan that
// does not match the cluster, or contradictory constraints.
func Compile(ctx context.Context, g *ir.Graph, c *mesh.Cluster, opts Options) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(g.Updates) > 0 {
		return nil, fmt.Errorf("compile: graph %s already holds a training step; compile takes the forward graph", g.Name)
	}
	if p := opts.From; p != nil {
		if err := p.CheckFor(g, c); err != nil {
			return nil, err
		}
		opts.Constraints, opts.Manual = ConstraintsOf(p), nil
		opts.Layers, opts.Microbatches, opts.Schedule = len(p.Layers), p.Microbatches, p.Schedule
	}
	opts = opts.withDefaults()
	if err := checkSearch(opts.Search); err != nil {
		return nil, err
	}
	sched, err := codegen.ParseSchedule(opts.Schedule)
	if err != nil {
		return nil, err
	}
	batch, err := passes.BatchSize(g)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	counts, err := microbatchCounts(batch, opts.Microbatches)
	if err != nil {
		return nil, err
	}
	if id, ok := passes.BatchCoupled(g); ok {
		// Micro-batches would change what the model computes: a plan must equal the step.
		if opts.Microbatches > 1 {
			v := g.Value(id)
			return nil, ir.Errorf(v.Pos, "compile: %d micro-batches would change what %s (%s) computes: it couples the samples of the batch (statistics over it); expected 1 micro-batch",
				opts.Microbatches, v.Name, v.Op)
		}
		counts = []int{1}
	}
	var best *Plan
	var why error // when no count gives a plan: the memory error that needs least, or the first
	for _, b := range counts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := compileWith(ctx, g, c, opts, sched, batch, b)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			why = worse(why, err)
			continue
		}
		if best == nil || p.Predicted.StepTime < best.Predicted.StepTime {
			best = p
		}
	}
	if best == nil {
		return nil, why
	}
	return best, nil
}

// worse picks the error to report of two: a memory error, which names the memory that
// would fit, over any other (a micro-batch count the model cannot take, say), and of two
// memory errors the one that needs less.
func worse(prev, err error) error {
	var pm, em *dp.MemoryError
	switch {
	case prev == nil:
		return err
	case !errors.As(err, &em):
		return prev
	case !errors.As(prev, &pm) || em.Need < pm.Need:
		return err
	}
	return prev
}

func (o Options) withDefaults() Options {
	if o.Optimizer.Kind == "" {
		o.Optimizer = passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	}
	if o.Schedule == "" {
		o.Schedule = "1f1b"
	}
	if o.ILPTimeLimit == 0 {
		o.ILPTimeLimit = 30 * time.Second
	}
	if o.Search == "" {
		o.Search = DefaultSearch
	}
	return o
}

// Searches are the values Options.Search takes.
var Searches = []string{SearchFast, SearchExhaustive}

const (
	SearchFast       = "fast"
	SearchExhaustive = "exhaustive"
	// DefaultSearch is the search an empty Options.Search selects.
	DefaultSearch = SearchExhaustive
)

func checkSearch(s string) error {
	if s != SearchFast && s != SearchExhaustive {
		return fmt.Errorf("compile: search %q: expected fast or exhaustive", s)
	}
	return nil
}

// microbatchCounts lists the B to try: the one asked for, or every divisor of the batch up
// to MaxAutoMicrobatches.
func microbatchCounts(batch, asked int) ([]int, error) {
	if asked < 0 {
		return nil, fmt.Errorf("compile: micro-batch count %d is negative", asked)
	}
	if asked > 0 {
		if batch%asked != 0 {
			return nil, fmt.Errorf("compile: the batch %d is not divisible by %d micro-batches", batch, asked)
		}
		return []int{asked}, nil
	}
	var out []int
	for b := 1; b <= min(batch, MaxAutoMicrobatches); b++ {
		if batch%b == 0 {
			out = append(out, b)
		}
	}
	return out, nil
}

// compileWith plans with b micro-batches.
func compileWith(ctx context.Context, g *ir.Graph, c *mesh.Cluster, opts Options, sched codegen.Schedule, batch, b int) (*Plan, error) {
	mb, err := passes.Rebatch(g, batch/b)
	if err != nil {
		return nil, err
	}
	step, err := passes.TrainingStep(mb, opts.Optimizer)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	layers := opts.Layers
	if layers == 0 {
		// More layers than devices buys no more stages, and every layer range is priced on
		// every submesh: the search grows with L².
		layers = min(8, c.Devices())
	}
	lay, err := passes.ClusterLayers(step, passes.ClusterOptions{Layers: layers})
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dc := dp.Cluster{Hosts: c.Hosts, DevicesPerHost: c.DevicesPerHost, MemoryPerDevice: float64(c.DeviceMemoryBytes)}
	if opts.MemoryPerDevice > 0 {
		dc.MemoryPerDevice = float64(opts.MemoryPerDevice)
	}
	cons := opts.Constraints
	if len(cons.Boundaries) > 0 && cons.Boundaries[len(cons.Boundaries)-1] != lay.L {
		return nil, fmt.Errorf("compile: the pinned stages end at layer %d but the step has %d layers", cons.Boundaries[len(cons.Boundaries)-1], lay.L)
	}
	if opts.Manual != nil {
		if cons, err = manualConstraints(opts.Manual, lay.L, c); err != nil {
			return nil, err
		}
	}
	do := dp.Options{Microbatches: b, Schedule: dpSchedule(sched), Constraints: cons}
	if err := dp.Check(lay.L, dc, do); err != nil {
		return nil, err // before the sharding ILPs, which a refused search would waste
	}
	o := newOracle(ctx, step, lay, c, opts.ILPTimeLimit, int64(dc.MemoryPerDevice))
	o.canonical = cons.Logical == nil && cons.StageLogicals == nil
	free := cons.Boundaries == nil && cons.Submesh == nil && cons.Logical == nil && cons.StageSubmeshes == nil
	o.fast = free && opts.Search == SearchFast
	if free {
		var progress func(done, total int)
		if opts.Progress != nil {
			progress = func(done, total int) { opts.Progress(b, "sharding ILPs", done, total) }
		}
		o.prefetch(lay.L, dc, progress)
	}
	if opts.Progress != nil {
		do.Progress = func(done, total int) { opts.Progress(b, "stage search", done, total) }
	}
	res, err := dp.Solve(ctx, lay.L, dc, o, do)
	if err == nil && o.fast {
		res, err = exactly(ctx, lay.L, dc, o, do, res)
	}
	if err != nil {
		if errors.Is(err, dp.ErrNoPlan) && o.err != nil {
			return nil, fmt.Errorf("%w: %v", err, o.err)
		}
		return nil, err
	}
	return assemble(g, step, lay, c, opts, sched, batch, b, res, o)
}

// exactly re-costs the stages the fast search chose with their own sharding ILPs (solved
// on all cores; identical stages share one), by the DP pinned to them, so that the plan's
// prices are the range ILPs'. When the exact stages do not fit where the composed ones
// did (the composition's memory is an estimate), it falls back to the exhaustive search.
func exactly(ctx context.Context, layers int, dc dp.Cluster, o *oracle, do dp.Options, fast *dp.Result) (*dp.Result, error) {
	o.fast = false
	var jobs []job
	pin := dp.Constraints{Boundaries: []int{0}}
	for _, st := range fast.Stages {
		pin.Boundaries = append(pin.Boundaries, st.End)
		pin.StageSubmeshes = append(pin.StageSubmeshes, st.Submesh)
		pin.StageLogicals = append(pin.StageLogicals, st.Logical)
		sg, err := o.stage(st.Start, st.End)
		if err != nil {
			return nil, err
		}
		key := solveKey{sg.hash, st.Submesh, st.Logical}
		if _, ok := o.solved[key]; !ok {
			o.solved[key] = nil
			jobs = append(jobs, job{key: key, sg: sg})
		}
	}
	o.run(jobs, nil)
	pinned := do
	pinned.Constraints, pinned.Progress = pin, nil
	res, err := dp.Solve(ctx, layers, dc, o, pinned)
	if err == nil || ctx.Err() != nil {
		return res, err
	}
	o.prefetch(layers, dc, nil)
	return dp.Solve(ctx, layers, dc, o, do)
}

func dpSchedule(s codegen.Schedule) dp.Schedule {
	if s == codegen.GPipe {
		return dp.GPipe
	}
	return dp.OneFOneB
}

// manualConstraints turns tp/pp/dp degrees into pinned stages: PP stages of equal layer
// counts (the first ones one longer when L does not divide), each on TP·DP devices with
// logical mesh (DP, TP).
func manualConstraints(m *Manual, layers int, c *mesh.Cluster) (dp.Constraints, error) {
	n, ok := mesh.CountDevices(m.TP, m.PP, m.DP)
	if !ok {
		return dp.Constraints{}, fmt.Errorf("plan %s uses more devices than any cluster has (at most %d) but cluster %s has %d", m, mesh.MaxDevices, c, c.Devices())
	}
	if n != c.Devices() {
		return dp.Constraints{}, fmt.Errorf("plan %s uses %d devices but cluster %s has %d", m, n, c, c.Devices())
	}
	if m.PP > layers {
		return dp.Constraints{}, fmt.Errorf("plan %s has more stages than the %d layers of the model", m, layers)
	}
	per := m.TP * m.DP
	var sub dp.Submesh
	switch {
	case per <= c.DevicesPerHost && c.DevicesPerHost%per == 0:
		sub = dp.Submesh{Hosts: 1, Devices: per}
	case per%c.DevicesPerHost == 0:
		sub = dp.Submesh{Hosts: per / c.DevicesPerHost, Devices: c.DevicesPerHost}
	default:
		return dp.Constraints{}, fmt.Errorf("plan %s: a stage of %d devices is neither part of a host of %d nor whole hosts",
			m, per, c.DevicesPerHost)
	}
	bounds := make([]int, m.PP+1)
	for i := range m.PP {
		bounds[i+1] = bounds[i] + layers/m.PP
		if i < layers%m.PP {
			bounds[i+1]++
		}
	}
	return dp.Constraints{Boundaries: bounds, Submesh: &sub, Logical: &dp.Logical{DP: m.DP, MP: m.TP}}, nil
}
