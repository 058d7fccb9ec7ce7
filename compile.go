package autopar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/program"
)

// Options steer Compile. The zero value compiles with SGD (momentum 0.9), micro-batches
// searched automatically, the 1F1B schedule and an automatic layer count.
type Options struct {
	// Optimizer is the update of the training step; the zero value is SGD with lr 0.1 and
	// momentum 0.9.
	Optimizer passes.Optimizer
	// Precision is the training step's precision (passes.ParsePrecision): "" keeps the
	// model's dtypes; "mixed" computes in bf16 with f32 master weights and optimizer state
	// (16 bytes per Adam param, as Megatron-LM and ZeRO hold). It sets Optimizer.Precision,
	// which must then be "" or the same.
	Precision string
	// Microbatches is B; 0 searches the divisors of the batch up to MaxAutoMicrobatches.
	// A model with an op that couples the samples of its batch (batch_norm under BatchNorm
	// "step") takes only 1.
	Microbatches int
	// BatchNorm is what batch_norm's statistics run over: "step" (the default) the whole
	// batch of the step, as the model says, which allows only one micro-batch; "microbatch"
	// each micro-batch, as GPipe and Alpa compute them (passes.PerMicrobatchStats), so
	// that the model can be pipelined. Either way they are synchronized across the
	// data-parallel devices that share a (micro-)batch.
	BatchNorm string
	// Schedule is "1f1b" (default) or "gpipe".
	Schedule string
	// Layers is the number of layers the step is clustered into; 0 picks DefaultLayers:
	// min(8, max(devices, the model's marked blocks)).
	Layers int
	// MemoryPerDevice overrides the cluster's device memory, in bytes; 0 keeps it.
	MemoryPerDevice int64
	// Manual, if set, fixes the plan to Megatron-style degrees, costed with the same model.
	Manual *Manual
	// From, if set, re-costs a saved plan: Compile refuses it unless it was compiled for the
	// same model and cluster (Plan.CheckFor), and pins its stages (ConstraintsOf), layer
	// count, micro-batch count, schedule and each stage's recomputation, which replace
	// Layers, Microbatches, Schedule, Manual, Constraints and Remat.
	From *Plan
	// Constraints pin parts of the plan (stage boundaries, submeshes, logical meshes); the
	// rest is searched. Manual, when set, replaces them.
	Constraints dp.Constraints
	// Remat is activation recomputation: "auto" (the default: the search decides per
	// stage, recomputing where memory forces it), "none" or "full" (every stage, as
	// Megatron-LM's full recomputation). See remat.go.
	Remat string
	// ILPIterations bounds each sharding ILP by effort: lp_solve's simplex iterations,
	// branch and bound included (ilp.Options.Iterations). A solve it stops returns the
	// same feasible point on any machine under any load, so the search, and the plan, do
	// not depend on them; 0 means DefaultILPIterations, negative no limit.
	ILPIterations int64
	// LPSolveOnly sends every sharding ILP to lp_solve, without first trying the
	// message-passing certificate (passes/sharding/certify.go), which answers the ILPs
	// whose optimum it can prove at lp_solve's own MIP gaps. Both give the same optimum;
	// where several plans tie, they may pick different ones. For comparing with lp_solve.
	LPSolveOnly bool
	// ILPTimeLimit bounds the CPU time of each sharding ILP, a backstop behind
	// ILPIterations (it varies from machine to machine); 0 means 30 s. Under an iteration
	// budget it is raised to 10 ms an iteration (sharding.Options.TimeLimit), so that the
	// budget, the same on every machine, stops each solve first; with ILPIterations < 0 it
	// is the only limit.
	ILPTimeLimit time.Duration
	// Search is how stages are priced: "fast" (the default) solves each distinct layer
	// at most once per logical mesh, only where a plan priced by lower bounds needs it
	// (bound.go), composes the price of a layer range from its layers' solutions
	// (compose.go), then solves the chosen stages exactly; "exhaustive" solves
	// one sharding ILP per (layer range, submesh, logical mesh), the reference.
	Search string
	// Progress, if set, is called as the search advances, with the micro-batch count being
	// tried and the phase: "sharding ILPs" (every stage priced, the long part) then "stage
	// search" (the DP). Calls come one at a time.
	Progress func(microbatches int, phase string, done, total int)
	// unweighted makes the stage ILPs minimise t + u instead of B·t + u (tests compare).
	unweighted bool
}

// MaxAutoMicrobatches bounds the micro-batch counts an automatic search tries.
const MaxAutoMicrobatches = 64

// Manual is plan.Manual: tp/pp/dp degrees in Megatron's terms.
type Manual = plan.Manual

// ParseManual reads "tp=8,pp=2,dp=32" (plan.ParseManual).
func ParseManual(s string) (*Manual, error) { return plan.ParseManual(s) }

// ConstraintsOf pins the stages of plan p: their layer ranges, submeshes and logical
// meshes, so that Compile re-costs a saved (or hand-edited) plan with the same model. Use it
// with Options.Layers = len(p.Layers) and Options.Microbatches = p.Microbatches.
func ConstraintsOf(p *Plan) dp.Constraints {
	var c dp.Constraints
	c.Boundaries = []int{0}
	for _, s := range p.Stages {
		c.Boundaries = append(c.Boundaries, s.LastLayer+1)
		c.StageSubmeshes = append(c.StageSubmeshes, s.Submesh)
		c.StageLogicals = append(c.StageLogicals, s.Logical)
	}
	return c
}

// Compile plans the training of forward graph g (whose first output is a scalar loss that
// is a mean over the batch) on cluster c: it runs Phases up to the search, once per
// micro-batch count, and returns the plan with the shortest step time (Plan.Programs is
// the lower phase). It returns a *dp.MemoryError-wrapping error when no plan fits in device
// memory (naming the memory that would fit), and errors naming the option at fault for a
// batch the micro-batch count does not divide, a manual plan that does not match the
// cluster, or contradictory constraints.
func Compile(ctx context.Context, g *ir.Graph, c *mesh.Cluster, opts Options) (*Plan, error) {
	s, err := Run(ctx, g, c, opts, &PhaseConfig{UpTo: "search", Check: checkEveryPhase})
	if err != nil {
		return nil, err
	}
	return s.Plan, nil
}

// prepare checks Compile's inputs and returns the compilation the phases start from, with
// the micro-batch counts to try.
func prepare(ctx context.Context, g *ir.Graph, c *mesh.Cluster, opts Options) (*Compilation, []int, error) {
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	if len(g.Updates) > 0 {
		return nil, nil, fmt.Errorf("compile: graph %s already holds a training step; compile takes the forward graph", g.Name)
	}
	if p := opts.From; p != nil {
		if err := p.CheckFor(g, c); err != nil {
			return nil, nil, err
		}
		opts.Constraints, opts.Manual = ConstraintsOf(p), nil
		opts.Layers, opts.Microbatches, opts.Schedule = len(p.Layers), p.Microbatches, p.Schedule
		opts.BatchNorm = p.BatchNorm
	}
	opts = opts.withDefaults()
	if err := checkSearch(opts.Search); err != nil {
		return nil, nil, err
	}
	if opts.Precision != "" {
		if opts.Optimizer.Precision != "" && opts.Optimizer.Precision != opts.Precision {
			return nil, nil, fmt.Errorf("compile: precision %q and the optimizer's precision %q differ: give one", opts.Precision, opts.Optimizer.Precision)
		}
		opts.Optimizer.Precision = opts.Precision
	}
	if _, err := passes.ParsePrecision(opts.Optimizer.Precision); err != nil {
		return nil, nil, fmt.Errorf("compile: %w", err)
	}
	if err := checkRemat(opts.Remat); err != nil {
		return nil, nil, err
	}
	if err := checkBatchNorm(opts.BatchNorm); err != nil {
		return nil, nil, err
	}
	sched, err := program.ParseSchedule(opts.Schedule)
	if err != nil {
		return nil, nil, err
	}
	batch, err := passes.BatchSize(g)
	if err != nil {
		return nil, nil, fmt.Errorf("compile: %w", err)
	}
	counts, err := microbatchCounts(batch, opts.Microbatches)
	if err != nil {
		return nil, nil, err
	}
	if counts, err = uncoupled(g, counts, opts); err != nil {
		return nil, nil, err
	}
	s := &Compilation{Model: g, Cluster: c, Options: opts, Schedule: sched, Batch: batch, ctx: ctx, shared: newShared()}
	return s, counts, nil
}

// uncoupled returns the micro-batch counts that keep what the model computes: those of
// which no op takes statistics across micro-batches (passes.BatchCoupled) in the forward
// graph the plan computes (Compilation.Forward). Asked for one that does not, it is an
// error naming the op.
func uncoupled(g *ir.Graph, counts []int, opts Options) ([]int, error) {
	var out []int
	for _, b := range counts {
		f, err := forwardFor(g, opts.BatchNorm, b)
		switch {
		case err != nil && opts.Microbatches == 0:
			continue // its statistics cannot be split so; 1 always can
		case err != nil:
			return nil, fmt.Errorf("compile: %w", err)
		}
		id, ok := passes.BatchCoupled(f, b)
		if !ok {
			out = append(out, b)
			continue
		}
		if opts.Microbatches == 0 {
			continue // a count the search cannot take; 1 always can
		}
		// Micro-batches would change what the model computes: a plan must equal the step.
		v := f.Value(id)
		hint := ""
		if v.Op == ir.OpBatchNorm && opts.BatchNorm != BatchNormMicrobatch {
			hint = " (or --batch-norm microbatch: statistics per micro-batch, as GPipe and Alpa take them)"
		}
		return nil, ir.Errorf(v.Pos, "compile: %d micro-batches would change what %s (%s) computes: it couples the samples of the batch (statistics over it); expected 1 micro-batch%s",
			b, v.Name, v.Op, hint)
	}
	return out, nil
}

// forwardFor is the forward graph a plan of forward graph g in b micro-batches computes
// under batch-norm mode bn (plan.Computed without its coupling check): g itself, or, under
// "microbatch", g with its batch norms' statistics per micro-batch.
func forwardFor(g *ir.Graph, bn string, b int) (*ir.Graph, error) {
	if bn != BatchNormMicrobatch {
		return g, nil
	}
	return passes.PerMicrobatchStats(g, b)
}

// The values Options.BatchNorm takes.
const (
	BatchNormStep       = "step"
	BatchNormMicrobatch = plan.BatchNormMicrobatch
)

func checkBatchNorm(s string) error {
	if s != "" && s != BatchNormStep && s != BatchNormMicrobatch {
		return fmt.Errorf("compile: batch norm %q: expected step (statistics over the step's batch) or microbatch (over each micro-batch)", s)
	}
	return nil
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
	if o.Remat == "" {
		o.Remat = RematAuto
	}
	if o.ILPTimeLimit == 0 {
		o.ILPTimeLimit = 30 * time.Second
	}
	if o.ILPIterations == 0 {
		o.ILPIterations = DefaultILPIterations
	}
	if o.Search == "" {
		o.Search = DefaultSearch
	}
	if o.BatchNorm == "" {
		o.BatchNorm = BatchNormStep
	}
	return o
}

// Searches are the values Options.Search takes.
var Searches = []string{SearchFast, SearchExhaustive}

const (
	SearchFast       = "fast"
	SearchExhaustive = "exhaustive"
	// DefaultSearch is the search an empty Options.Search selects.
	DefaultSearch = SearchFast
)

func checkSearch(s string) error {
	if s != SearchFast && s != SearchExhaustive {
		return fmt.Errorf("compile: search %q: expected fast or exhaustive", s)
	}
	return nil
}

// searchStats says what a compile's search did, for tests and benchmarks.
type searchStats struct {
	solves     int // sharding ILPs solved, every micro-batch count together
	largestILP int // variables of the largest
	composed   int // layer ranges the fast search priced by composition
	inexact    int // of them, those whose price is not proven equal to the range's ILP
	skipped    int // micro-batch counts the bound skipped (boundOrder)
	// bounded counts the (layer, logical mesh) pairs the fast search priced by their bound
	// alone and never solved (bound.go)
	bounded int
}

// compileSearch is Compile, also saying what its search did.
func compileSearch(ctx context.Context, g *ir.Graph, c *mesh.Cluster, opts Options) (*Plan, searchStats, error) {
	s, err := Run(ctx, g, c, opts, &PhaseConfig{UpTo: "search", Check: checkEveryPhase})
	if err != nil {
		return nil, searchStats{}, err
	}
	sh := s.shared
	st := searchStats{solves: int(sh.solves.Load()), largestILP: int(sh.maxVars.Load()),
		composed: int(sh.nComposed.Load()), inexact: int(sh.nInexact.Load()), skipped: int(sh.skipped.Load())}
	for k := range sh.bounds {
		if _, ok := sh.solved[k]; !ok {
			st.bounded++
		}
	}
	return s.Plan, st, nil
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

// attempt is one micro-batch count's search, between setUp and finish.
type attempt struct {
	s    *Compilation
	dc   dp.Cluster
	do   dp.Options
	o    *oracle
	free bool // nothing is pinned: every stage is searched (and prefetched)
	// bound is the fast search's optimistic step time (0: none).
	bound float64
	// progress counts the sharding ILPs of the whole compile.
	progress *ilpProgress
	// fallback: the fast search found no plan; finish runs the exhaustive search.
	fallback bool
	// yieldAt, when > 0, is the optimistic step time at which the count's settle stops
	// and hands the turn to the count of the next bound (searchAll, errYield); yields
	// counts them (at most maxYields).
	yieldAt float64
	yields  int
	// ex is the count's exactly between its turns: set once its settle is done and its
	// exactly has begun, kept when it yields there (searchAll resumes it where it stopped).
	ex *exactState
	// held is a plan of this count found before its search ended: its seed (seedPlan), or
	// ex's incumbent when the count yielded holding one (hold). No count's plan will be
	// slower, so the counts searched meanwhile are cut against it (searchAll's top), and
	// the count's exactly starts from it where it is faster than its own first plan.
	held    *Plan
	heldRes *dp.Result // the DP's plan held is made of
}

// noFastPlan, set by tests only, makes the fast search of the micro-batch counts it
// reports find no plan, as if its stages did not fit (TestDeferredCounts).
var noFastPlan func(microbatches int) bool

// countTrace, set by tests and benchmarks only (-count-trace), hears what searchAll does
// with each micro-batch count: its bound and optimistic plan ("bounded", boundOrder); after
// its lazy layer solves, its optimistic step again and the composed plan ("settled");
// then its bound when its turn came and what became of it ("searched", "skipped",
// "deferred", "exhaustive"), with the step time of its plan (0: none), and the sharding
// ILPs the compile had solved by then.
var countTrace func(microbatches int, bound float64, outcome string, step float64, solves int64)

// cutoffFor, set by tests only, replaces a count's cutoff (oracle.cutoff) by its value
// for the count's micro-batches (TestOutbidCounts).
var cutoffFor func(microbatches int) float64

// errNoFastPlan is a count whose fast search found no plan: neither the composed prices
// nor the stages exactly solved fit (the composition's memory is an estimate). searchAll
// runs its exhaustive search after the other counts, unless a plan found beats its bound.
var errNoFastPlan = errors.New("compile: the fast search found no plan")

// errSkipped is a micro-batch count the search did not finish: its optimistic bound
// loses to a plan already found by more than boundMargin (boundOrder).
var errSkipped = errors.New("compile: skipped, its optimistic bound loses to another micro-batch count's plan")

// errYield is a count whose fast search stopped mid-settle because its bound, raised by
// the layers it solved, passed another count's (attempt.yieldAt): searchAll resumes it
// when its bound is the lowest again. Its oracle keeps what it solved.
var errYield = errors.New("compile: yielded to a count of lower bound")

// maxYields bounds how often one count yields (errYield): past it, the count runs to its
// end when its turn comes, so the count loop ends.
const maxYields = 8

// yieldMargin: a count yields when its bound passes the next count's by this fraction, so
// that counts of near-equal bounds do not hand the turn back and forth each round. A
// variable for TestYieldedCounts, which sets it below −1 + 1e-9 so that every count yields
// at each turn until maxYields.
var yieldMargin = 0.005

// searchAll is the search phase: it plans the training step of every compilation (one per
// micro-batch count), clustered into layers, with the DP over stages and submeshes priced
// by the sharding ILPs, and sets each one's Search (the DP's result) and Plan. The sharding
// ILPs of every count are counted by one progress (micro-batch count 0), a solve two
// counts share running once. The exhaustive search runs them all first, together, on all
// cores. The fast search solves none up front: the counts are searched in the order of
// their optimistic bound (from bounds that need no ILP, bound.go), each solving only the
// layers its optimistic plans run (oracle.settle), and a count whose bound loses to the
// best plan found by over boundMargin is skipped (errSkipped); so is, without an ILP, a
// count whose optimistic plan does not exist (memFloor: no plan of it can fit). A count
// whose fast search finds no plan (errNoFastPlan) waits: its exhaustive search runs after
// the others, unless the plan found beats its bound, which by then counts the layers and
// stages it solved. It returns one error per compilation, nil where it has a plan.
func searchAll(ss []*Compilation) []error {
	errs := make([]error, len(ss))
	chooseLayering(ss)
	var atts []*attempt
	for i, s := range ss {
		a, err := setUp(s)
		if err != nil {
			errs[i] = err
			continue
		}
		atts = append(atts, a)
	}
	if len(atts) == 0 {
		return errs
	}
	ctx, opts := atts[0].s.ctx, atts[0].s.Options
	progress := solveAll(atts, opts.Progress)
	var best *Compilation
	var deferred []*attempt
	// top is the step of the fastest plan known: best's, or one a count holds (its seed, or
	// its incumbent when it yielded in exactly: attempt.held), which its count's search can
	// only better. +Inf: none yet.
	top := func() float64 {
		t := math.Inf(1)
		if best != nil {
			t = best.Plan.Predicted.StepTime
		}
		for _, a := range atts {
			if a.held != nil {
				t = min(t, a.held.Predicted.StepTime)
			}
		}
		return t
	}
	queue := boundOrder(ctx, atts)
	if last := atts[len(atts)-1]; last.o.fast && len(atts) > 1 {
		last.progress = progress
		last.seedPlan(ctx)
	}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		i := slices.Index(ss, a.s)
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if (!math.IsInf(top(), 1) || a.yields > 0) && a.o.fast {
			// Again: the counts searched so far may have solved layers of this count's shapes.
			a.bound = a.optimistic(ctx)
		}
		if t := top(); a.loses(t) {
			if errs[i] = a.endLosing(t, "skipped"); errs[i] == nil && (best == nil || a.s.Plan.Predicted.StepTime < best.Plan.Predicted.StepTime) {
				best = a.s
			}
			continue
		}
		a.progress = progress
		a.o.cutoff, a.yieldAt, a.o.top = 0, 0, top()
		if !math.IsInf(a.o.top, 1) && a.o.fast {
			a.o.cutoff = a.o.top * (1 + boundMargin)
		}
		if cutoffFor != nil && a.o.fast {
			a.o.cutoff = cutoffFor(a.s.Microbatches)
		} else if a.o.fast && len(queue) > 0 && queue[0].o.fast && a.yields < maxYields {
			// Best first across counts: past the next count's bound, this count waits
			// (errYield), so a count whose bound its first solves raise far is not searched
			// to its end before the others have had their turn and, maybe, a plan that
			// outbids it (docs/DECISIONS.md, "wres4").
			if y := queue[0].bound * (1 + yieldMargin); a.o.cutoff == 0 || y < a.o.cutoff {
				a.o.cutoff, a.yieldAt = y, y
			}
		}
		errs[i] = a.finish()
		if errors.Is(errs[i], errYield) {
			a.yields++
			errs[i] = nil
			at, _ := slices.BinarySearchFunc(queue, a.bound, func(x *attempt, b float64) int {
				if x.bound <= b {
					return -1 // after the counts of an equal bound
				}
				return 1
			})
			queue = slices.Insert(queue, at, a)
			continue
		}
		if errors.Is(errs[i], errSkipped) {
			continue
		}
		if errors.Is(errs[i], errNoFastPlan) {
			a.trace("deferred")
			deferred = append(deferred, a)
			continue
		}
		errs[i] = a.faster(errs[i])
		a.trace("searched")
		if errs[i] == nil && (best == nil || a.s.Plan.Predicted.StepTime < best.Plan.Predicted.StepTime) {
			best = a.s
		}
	}
	// The counts without a fast plan, by their bounds (now from the layers and stages
	// they solved): the exhaustive search runs for those that could still win.
	slices.SortStableFunc(deferred, func(x, y *attempt) int { return cmp.Compare(x.bound, y.bound) })
	for _, a := range deferred {
		i := slices.Index(ss, a.s)
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		if t := top(); a.loses(t) {
			errs[i] = a.endLosing(t, "skipped")
		} else {
			a.fallback = true
			errs[i] = a.faster(a.finish())
		}
		if errs[i] == nil && (best == nil || a.s.Plan.Predicted.StepTime < best.Plan.Predicted.StepTime) {
			best = a.s
		}
		a.trace("exhaustive")
	}
	return errs
}

// loses says whether the count's bound loses by more than boundMargin to top, the step of
// the fastest plan found (+Inf: none).
func (a *attempt) loses(top float64) bool {
	return !math.IsInf(top, 1) && a.bound >= top*(1+boundMargin)
}

// endLosing ends a count whose bound lost (loses, or settle's or exactly's cutoff: the
// outcome traced): skipped (errSkipped, counted), its held plan dropped, unless that plan
// is the fastest known (top): then the count ends with it ("held"), since its bound, which
// lost, was then no bound of it (lower's caveats), and a plan found is not thrown away.
func (a *attempt) endLosing(top float64, outcome string) error {
	if a.held != nil && a.held.Predicted.StepTime <= top {
		a.trace("held")
		return a.keepHeld(nil)
	}
	a.held, a.heldRes = nil, nil
	a.s.shared.skipped.Add(1)
	a.trace(outcome)
	return errSkipped
}

// keepHeld ends a count that holds a plan (attempt.held) with that plan instead of err;
// without one it returns err.
func (a *attempt) keepHeld(err error) error {
	if a.held == nil {
		return err
	}
	a.s.Search, a.s.Plan = a.heldRes, a.held
	a.held, a.heldRes = nil, nil
	return nil
}

// setUp checks s's search options and builds its oracle.
func setUp(s *Compilation) (*attempt, error) {
	ctx, step, lay, c, opts := s.ctx, s.Step, s.Layering, s.Cluster, s.Options
	var err error
	dc := dp.ClusterOf(c)
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
	do := dp.Options{Microbatches: s.Microbatches, Schedule: s.Schedule, Constraints: cons}
	if err := dp.Check(lay.L, dc, do); err != nil {
		return nil, err // before the sharding ILPs, which a refused search would waste
	}
	o := newOracle(ctx, step, lay, c, opts.ILPTimeLimit, int64(dc.MemoryPerDevice), s.shared)
	o.iters = opts.ILPIterations
	o.lpOnly = opts.LPSolveOnly
	if !opts.unweighted {
		o.mb = s.Microbatches
	}
	o.canonical = cons.Logical == nil && cons.StageLogicals == nil
	o.remat = opts.Remat
	if p := opts.From; p != nil {
		o.pinned = map[[2]int]int{}
		for _, s := range p.Stages {
			o.pinned[[2]int{s.FirstLayer, s.LastLayer + 1}] = choice(s.Recompute, s.RecomputeLayers)
		}
	}
	free := cons.Boundaries == nil && cons.Submesh == nil && cons.Logical == nil && cons.StageSubmeshes == nil
	o.fast = free && opts.Search == SearchFast
	o.lazy = o.fast
	return &attempt{s: s, dc: dc, do: do, o: o, free: free}, nil
}

// finish runs the stage DP on the prefetched prices and sets the compilation's Search and
// Plan.
func (a *attempt) finish() error {
	s, do, o, dc := a.s, a.do, a.o, a.dc
	ctx, lay, opts, b := s.ctx, s.Layering, s.Options, s.Microbatches
	if opts.Progress != nil {
		do.Progress = func(done, total int) { opts.Progress(b, "stage search", done, total) }
	}
	var res *dp.Result
	var err error
	switch {
	case a.fallback:
		// The fast search found no plan for this count (searchAll deferred it): the reference.
		a.fallback = false
		o.fast, o.lazy = false, false
		o.prefetch(lay.L, dc, nil)
		res, err = dp.Solve(ctx, lay.L, dc, o, do)
	case o.fast:
		if a.ex == nil {
			o.settle(ctx, lay.L, dc, do, a.progress)
			if o.outbid {
				return a.stopped()
			}
			res, err = dp.Solve(ctx, lay.L, dc, o, do)
			if ctx.Err() != nil {
				break
			}
			if countTrace != nil && err == nil {
				countTrace(b, a.optimistic(ctx), "settled "+stagesOf(res), res.Time, s.shared.solves.Load())
			}
			if err == nil {
				a.ex = o.startExactly(ctx, lay.L, dc, quietOf(do), res, a.progress)
				if h := a.heldRes; h != nil && (a.ex.best == nil || h.Time < a.ex.best.Time) {
					a.ex.best, a.ex.err = h, nil // the seed (seedPlan) is the incumbent to beat
				}
			}
		}
		if a.ex != nil {
			// Its rounds, from where the last turn left them (a yield in exactly).
			res, err = o.exactRounds(ctx, lay.L, dc, quietOf(do), a.ex, a.progress)
			if o.outbid {
				return a.stopped()
			}
		}
		if noFastPlan != nil && noFastPlan(b) {
			res, err = nil, nil
		}
		if res == nil && ctx.Err() == nil {
			// No plan from the composed prices (their memory is an estimate) or from
			// the stages exactly solved: the exhaustive search of this count decides,
			// which searchAll runs only if no other count's plan beats its bound.
			o.fast, o.lazy = true, true // exactly ends them; the bound prices by them
			a.bound = a.optimistic(ctx)
			o.fast, o.lazy = false, false
			o.countComposed()
			return errNoFastPlan
		}
	default:
		res, err = dp.Solve(ctx, lay.L, dc, o, do)
	}
	o.countComposed()
	if err != nil {
		if errors.Is(err, dp.ErrNoPlan) && o.err != nil {
			return fmt.Errorf("%w: %v", err, o.err)
		}
		return err
	}
	p, err := assemble(s.Model, s.Step, lay, s.Cluster, opts, s.Schedule, s.Batch, b, res, o)
	if err != nil {
		return err
	}
	s.Search, s.Plan = res, p
	return nil
}

// stopped ends a turn whose settle or exactly stopped at the count's cutoff (o.outbid):
// where the cutoff was the next count's bound (yieldAt, below the best plan's cutoff) the
// count waits, lazy as it is and with its exactly's rounds kept, for its bound's turn
// again (errYield), publishing the plan it holds, if any (held); otherwise its bound lost
// to the best plan mid-search: skipped like loses (endLosing).
func (a *attempt) stopped() error {
	o, ctx := a.o, a.s.ctx
	o.outbid = false
	if a.yieldAt > 0 {
		a.bound = a.optimistic(ctx)
		a.hold()
		a.trace("yield")
		return errYield
	}
	o.fast, o.lazy = true, true
	a.bound = a.optimistic(ctx)
	o.fast, o.lazy = false, false
	o.countComposed()
	a.hold()
	return a.endLosing(o.top, "outbid")
}

// faster ends a count whose search ended with err (nil: a plan, a.s.Plan) with the plan it
// held (seedPlan, hold) where that is faster or the search found none.
func (a *attempt) faster(err error) error {
	if a.held != nil && a.s.ctx.Err() == nil && (err != nil || a.held.Predicted.StepTime < a.s.Plan.Predicted.StepTime) {
		return a.keepHeld(err)
	}
	a.held, a.heldRes = nil, nil
	return err
}

// hold assembles the plan of the incumbent of the count's exactly (attempt.held), if it
// has one not held yet.
func (a *attempt) hold() {
	if a.ex == nil || a.ex.best == nil || a.heldRes == a.ex.best || a.heldRes != nil && a.heldRes.Time <= a.ex.best.Time {
		return
	}
	a.holdPlan(a.ex.best)
}

// holdPlan makes res, a plan of the count priced exactly, its held plan.
func (a *attempt) holdPlan(res *dp.Result) {
	s := a.s
	p, err := assemble(s.Model, s.Step, s.Layering, s.Cluster, s.Options, s.Schedule, s.Batch, s.Microbatches, res, a.o)
	if err != nil {
		return
	}
	a.held, a.heldRes = p, res
}

// seedPlan gives the count a first plan before its search, to cut the others against
// (attempt.held): Megatron's pipeline, one layer a stage, each on devices/L devices of one
// host, all of them tensor-parallel (logical mesh 1 × devices/L), its stages solved by their
// own ILPs as exactly re-costs a plan. Only where the devices split so (L divides them, a
// stage's devices divide a host's); a seed that does not fit gives none. Any plan is an
// upper bound on the search's, so the seed skips nothing a bound would not: a count loses
// only where its bound passes the seed's step by boundMargin, as against any plan found.
// The one-layer stages on one-dimensional meshes are the cheapest stage ILPs of a pipeline
// that spreads the weights over every device.
func (a *attempt) seedPlan(ctx context.Context) {
	res := a.seed(ctx)
	if res == nil {
		return
	}
	a.holdPlan(res)
	if countTrace != nil && a.held != nil {
		countTrace(a.s.Microbatches, a.bound, "seeded "+stagesOf(res), a.held.Predicted.StepTime, a.s.shared.solves.Load())
	}
}

// seed is the DP's price of seedPlan's pipeline, nil where the devices do not split so or
// it does not fit.
func (a *attempt) seed(ctx context.Context) *dp.Result {
	L, c := a.s.Layering.L, a.s.Cluster
	n := c.Devices()
	if L < 2 || n%L != 0 || n/L > c.DevicesPerHost || c.DevicesPerHost%(n/L) != 0 || a.s.Microbatches < L {
		return nil
	}
	per := n / L
	p := &dp.Result{}
	for k := range L {
		p.Stages = append(p.Stages, dp.Stage{Start: k, End: k + 1, Submesh: mesh.Submesh{Hosts: 1, Devices: per}, Logical: mesh.LogicalShape{1, per}})
	}
	res, err := a.o.recost(ctx, L, a.dc, quietOf(a.do), p, a.progress)
	if err != nil || ctx.Err() != nil {
		return nil
	}
	return res
}

// quietOf is do without its progress: exactly's DPs are not the stage search the user
// watches.
func quietOf(do dp.Options) dp.Options {
	do.Progress = nil
	return do
}

// solveAll runs the sharding ILPs of every micro-batch count's exhaustive search at once,
// on all cores, so that progress covers the whole compile (its micro-batch count is 0) and
// a solve shared by two counts runs once. The fast search's solves (bound.go) follow,
// count by count, through the progress it returns; the total grows by their number as
// each batch is known.
func solveAll(atts []*attempt, report func(microbatches int, phase string, done, total int)) *ilpProgress {
	var jobs []job
	for _, a := range atts {
		if a.free && !a.o.lazy {
			jobs = append(jobs, a.o.jobs(a.s.Layering.L, a.dc)...)
		}
	}
	pr := &ilpProgress{report: report}
	atts[0].o.run(jobs, pr.more()) // the oracles share their solutions: any one runs them
	return pr
}

// ilpProgress reports the sharding ILPs of a whole compile as one count.
type ilpProgress struct {
	report      func(microbatches int, phase string, done, total int)
	done, total int
}

// more returns the progress callback of the next batch of solves.
func (p *ilpProgress) more() func(done, total int) {
	if p == nil || p.report == nil {
		return nil
	}
	base := p.done
	return func(done, total int) {
		p.done, p.total = base+done, base+total
		p.report(0, "sharding ILPs", p.done, p.total)
	}
}

// boundMargin: a micro-batch count whose optimistic bound is within this fraction of the
// best plan found is searched all the same, since the bound is not a proof (oracle.lower).
const boundMargin = 0.02

// boundOrder prices, in the fast search, each micro-batch count's plan optimistically (the
// DP on oracle.lower, from the layers' bounds, bound.go) and orders the counts by it, so
// that the best plan is found first and the counts whose bound already loses to it by more
// than boundMargin are skipped (Alpa's bound on t_max, applied to micro-batch counts). The
// exhaustive search keeps the counts in order and skips none.
func boundOrder(ctx context.Context, atts []*attempt) []*attempt {
	order := slices.Clone(atts)
	for _, a := range order {
		a.bound = 0
		if !a.o.fast {
			continue
		}
		a.bound = a.optimistic(ctx)
		if countTrace != nil {
			if res, err := a.o.optimisticPlan(ctx, a.s.Layering.L, a.dc, a.do); err == nil {
				countTrace(a.s.Microbatches, a.bound, "bounded "+stagesOf(res), 0, 0)
			}
		}
	}
	slices.SortStableFunc(order, func(x, y *attempt) int { return cmp.Compare(x.bound, y.bound) })
	return order
}

// optimistic is the step time of the count's optimistic plan (oracle.optimisticPlan), its
// receives priced where its stages sit as the prediction prices them (dp.Receiver): a
// lower bound on the predicted step of every plan of the count; +Inf when there is none,
// since then not even the bounds (time and memory) fit: the count has no plan.
func (a *attempt) optimistic(ctx context.Context) float64 {
	res, err := a.o.optimisticPlan(ctx, a.s.Layering.L, a.dc, a.do)
	if err != nil {
		return math.Inf(1)
	}
	return res.Time
}

// exactState is a count's exactly between its rounds: its incumbent and what its rounds
// have tried. searchAll keeps it across the count's turns, so that a count that yields
// mid-exactly (its bound past the next count's) goes on where it stopped.
type exactState struct {
	fast, first *dp.Result // the composed plan; the one re-costed first (cheapStart)
	best        *dp.Result // the incumbent (nil: none)
	err         error
	round       int
	proven      bool              // best is within its tolerance of the optimistic bound (o.tolerance)
	recosted    map[string]bool   // optimistic plans with restricted stages re-costed as they are
	near        map[rangeKey]bool // restricted stages a re-cost ran within refineTolerance of their bound
}

// exactly (startExactly, then exactRounds) turns the fast search's choice into a plan
// priced by range ILPs, and bounds how far it can be from the exhaustive search's. The
// stages the composed prices chose are solved by their own ILPs (on all cores; identical
// stages share one) and re-costed by the DP pinned to them: the incumbent. Then,
// branch-and-bound style, the DP runs on optimistic prices (a solved range's ILP, otherwise
// the sum of its layers' optima, oracle.lower): its value bounds every plan from below.
// Until the incumbent is within refineTolerance of that bound, the stages of the optimistic
// plan are solved exactly, and that plan, re-costed, replaces the incumbent when faster.
// When the optimistic plan runs a layer not solved yet (bound.go), that round solves its
// layers instead (within the tolerance, those on cheap meshes only; see settle), and the DP
// plans again. At most maxRefinements rounds of range solves. If the chosen stages do not
// fit where the composed ones did (the composition's memory is an estimate) and no round
// finds a plan, it returns none: the exhaustive search of this count then runs after the
// other counts, if their plans do not beat its bound (searchAll).
//
// startExactly re-costs the fast search's plan (or the optimistic plan, cheapStart): the
// first incumbent of exactly's rounds. do has no progress (quietOf).
func (o *oracle) startExactly(ctx context.Context, layers int, dc dp.Cluster, do dp.Options, fast *dp.Result, progress *ilpProgress) *exactState {
	st := &exactState{fast: fast, first: fast, recosted: map[string]bool{}, near: map[rangeKey]bool{}}
	if opt := o.cheapStart(ctx, layers, dc, do, fast); opt != nil {
		st.first = opt // its re-cost solves no ILP; fast's would solve a memory-bound one (restrict.go)
	}
	st.best, st.err = o.recost(ctx, layers, dc, do, st.first, progress)
	if st.first != fast && st.best == nil {
		st.first = fast
		st.best, st.err = o.recost(ctx, layers, dc, do, fast, progress)
	}
	return st
}

// exactRounds runs exactly's rounds from st. A round whose optimistic plan reaches the
// count's cutoff (o.cutoff: the best plan of another count plus boundMargin, or the next
// count's bound, searchAll's yieldAt) sets o.outbid and returns at once, as settle does,
// with st as it is: no plan of this count can then beat the cutoff by more than the
// optimistic bound allows, the test loses makes. A round already within the tolerance goes
// on to its proof, which solves no range ILP.
func (o *oracle) exactRounds(ctx context.Context, layers int, dc dp.Cluster, quiet dp.Options, st *exactState, progress *ilpProgress) (*dp.Result, error) {
	for st.round < maxRefinements && ctx.Err() == nil {
		opt, oerr := o.optimisticPlan(ctx, layers, dc, quiet)
		if oerr != nil {
			break
		}
		within := st.best != nil && (st.best.Time <= opt.Time*(1+o.tolerance(st.best)) || o.nearTop(opt)) // neartop.go
		o.roundTrace("exactly", opt, st.best)
		if !within && o.cutoff > 0 && opt.Time >= o.cutoff {
			o.outbid = true
			return st.best, st.err
		}
		if jobs := o.unsolved(opt, within); len(jobs) > 0 {
			o.solveLayers(jobs, progress)
			continue
		}
		if within {
			st.proven = true
			break
		}
		if o.memRefute(opt) || o.refute(opt, lagTarget(o.cutoff, o.top, st.best)) {
			continue // a stage's peak floor or dual bound raised its price: plan again before its range ILP (bound.go)
		}
		if sig := stagesOf(opt); o.hasRestricted(opt) && !st.recosted[sig] {
			// Re-cost opt as it is first, its restricted stages at their restricted plans:
			// where that plan is within the tolerance of the bound it is accepted, as a
			// restricted incumbent is, without the restricted stages' range ILPs
			// (openRestricted: memory-bound and dear on the MoE rows, 10-12 CPU s each).
			st.recosted[sig] = true
			st.round++
			res, rerr := o.recost(ctx, layers, dc, quiet, opt, progress)
			if rerr == nil {
				o.markNear(opt, res, st.near)
				if st.best == nil || res.Time < st.best.Time {
					st.best, st.err = res, nil
				}
			}
			continue
		}
		// The restricted stages whose restricted plan ran opt's re-cost at their bound first:
		// only their range ILPs can close the gap; the others' only when none is left.
		if st.best != nil && st.best.Time <= opt.Time*(1+restrictTolerance) && o.memoryBound(opt) {
			st.proven = true // within the contract; opt's range ILP is memory-bound (restrict.go)
			break
		}
		if cheap := o.cheapFirst(opt, st.best); cheap != nil && o.openRestricted(cheap, progress) {
			// The incumbent's cheap restricted stages first (restrict.go): re-cost it by them.
			st.round++
			if res, rerr := o.recost(ctx, layers, dc, quiet, st.best, progress); rerr == nil && res.Time < st.best.Time {
				st.best, st.err = res, nil
			}
			continue
		}
		if o.openRestricted(farFrom(opt, st.near), progress) || o.openRestricted(opt, progress) {
			continue // the bound of a restricted stage of opt is now its range ILP's price
		}
		st.round++
		res, rerr := o.recost(ctx, layers, dc, quiet, opt, progress)
		if rerr == nil && (st.best == nil || res.Time < st.best.Time) {
			st.best, st.err = res, nil
		}
	}
	if !st.proven && ctx.Err() == nil {
		if st.first != st.fast { // unproven: fast re-costed too, as it always was
			if res, rerr := o.recost(ctx, layers, dc, quiet, st.fast, progress); rerr == nil && (st.best == nil || res.Time < st.best.Time) {
				st.best, st.err = res, nil
			}
		}
		st.best = o.unrestrict(ctx, layers, dc, quiet, st.best, progress)
	}
	o.fast, o.lazy = false, false
	return st.best, st.err
}

// hasRestricted says whether a stage of p is priced by its restricted plan and not yet by
// its range ILP (restrict.go: openRestricted would solve it).
func (o *oracle) hasRestricted(p *dp.Result) bool {
	for _, st := range p.Stages {
		if _, sol := o.pendingRestricted(st); sol != nil {
			return true
		}
	}
	return false
}

// markNear marks in near the restricted stages of opt that res, opt re-costed (pinned to
// its stages), runs within refineTolerance of their optimistic price, time and step: their
// range ILPs could gain little on them, so openRestricted leaves them for last.
func (o *oracle) markNear(opt, res *dp.Result, near map[rangeKey]bool) {
	if len(res.Stages) != len(opt.Stages) {
		return
	}
	for i, st := range opt.Stages {
		k, sol := o.pendingRestricted(st)
		if sol == nil {
			continue
		}
		r := res.Stages[i].Cost
		if r.Time <= st.Cost.Time*(1+refineTolerance) && r.Step <= st.Cost.Step*(1+refineTolerance) {
			near[k] = true
		}
	}
}

// farFrom is opt without its stages marked near (markNear).
func farFrom(opt *dp.Result, near map[rangeKey]bool) *dp.Result {
	far := *opt
	far.Stages = nil
	for _, st := range opt.Stages {
		if !near[stageKey(st)] {
			far.Stages = append(far.Stages, st)
		}
	}
	return &far
}

// refineTolerance is how close to the optimistic bound the fast search's plan must be
// before exactly stops refining it.
const refineTolerance = 0.002

// maxRefinements bounds the rounds of exactly.
const maxRefinements = 12

// recost solves the stages of plan p by their range ILPs and runs the DP pinned to them.
func (o *oracle) recost(ctx context.Context, layers int, dc dp.Cluster, do dp.Options, p *dp.Result, progress *ilpProgress) (*dp.Result, error) {
	var jobs []job
	pin := dp.Constraints{Boundaries: []int{0}}
	for _, st := range p.Stages {
		pin.Boundaries = append(pin.Boundaries, st.End)
		pin.StageSubmeshes = append(pin.StageSubmeshes, st.Submesh)
		pin.StageLogicals = append(pin.StageLogicals, st.Logical)
		if o.restrictStage(st.Start, st.End, st.Submesh, st.Logical) {
			continue // priced by the plan its layers compose (restrict.go)
		}
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
	o.run(jobs, progress.more())
	for _, st := range p.Stages {
		k := stageKey(st)
		if _, ok := o.restricted[k]; ok {
			continue
		}
		sol := o.solve(k.start, k.end, k.sub, k.logical)
		o.exactAt[k] = composedCost{cost: sol.costFor(o.remat), ok: sol.ok, exact: true}
	}
	do.Constraints = pin
	return dp.Solve(ctx, layers, dc, o, do)
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
	var sub mesh.Submesh
	switch {
	case per <= c.DevicesPerHost && c.DevicesPerHost%per == 0:
		sub = mesh.Submesh{Hosts: 1, Devices: per}
	case per%c.DevicesPerHost == 0:
		sub = mesh.Submesh{Hosts: per / c.DevicesPerHost, Devices: c.DevicesPerHost}
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
	return dp.Constraints{Boundaries: bounds, Submesh: &sub, Logical: &mesh.LogicalShape{m.DP, m.TP}}, nil
}

// trace tells countTrace, if set, what became of a's count.
func (a *attempt) trace(outcome string) {
	if countTrace == nil {
		return
	}
	step := 0.0
	if a.s.Plan != nil {
		step = a.s.Plan.Predicted.StepTime
	}
	if r := a.s.Search; r != nil && outcome != "skipped" {
		outcome += " " + stagesOf(r)
	}
	countTrace(a.s.Microbatches, a.bound, outcome, step, a.s.shared.solves.Load())
}

// roundTrace tells countTrace, if set, the optimistic plan opt and the plan res (nil:
// none) of a round of settle or exactly.
func (o *oracle) roundTrace(what string, opt, res *dp.Result) {
	if countTrace == nil {
		return
	}
	step, plan := 0.0, "none"
	if res != nil {
		step, plan = res.Time, stagesOf(res)
	}
	countTrace(o.mb, opt.Time, what+": optimistic "+stagesOf(opt)+"| plan "+plan, step, o.solves.Load())
}

// stagesOf describes r's stages for countTrace: layers, logical mesh, way to run.
func stagesOf(r *dp.Result) string {
	var b strings.Builder
	for _, st := range r.Stages {
		fmt.Fprintf(&b, "[%d,%d)%dx%d", st.Start, st.End, st.Logical[0], st.Logical[1])
		switch {
		case st.Cost.Checkpoints:
			b.WriteString("/layers")
		case st.Cost.Recompute:
			b.WriteString("/whole")
		}
		fmt.Fprintf(&b, " t=%.4g u=%.4g ", st.Cost.Time, st.Cost.Step)
	}
	return b.String()
}
