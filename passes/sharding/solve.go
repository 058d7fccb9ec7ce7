package sharding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Options tune Solve. The zero value is usable with a Cluster or DeviceFLOPS set.
type Options struct {
	// Cluster prices each op by its roofline (mesh.Cluster.OpTime) and, when
	// MemoryBudget is 0, gives the budget (its device memory).
	Cluster *mesh.Cluster
	// DeviceFLOPS replaces the roofline by FLOPs / DeviceFLOPS alone; hand-checked
	// tests with α = β = 1 use 1.
	DeviceFLOPS float64
	// AlpaCompute selects Alpa's own cost convention: compute costs are zero and heavy ops
	// (contractions, convolutions) never replicate their work on a mesh axis of size > 1.
	// The known-answer expectations of Alpa's tests are stated under it.
	AlpaCompute bool
	// MemoryBudget is the bytes each device may hold at its peak; 0 means the cluster's
	// device memory, or no limit without a cluster.
	MemoryBudget int64
	// TimeLimit bounds each lp_solve call's CPU time (ilp.Options); 0 means a minute. With
	// Iterations it is a backstop, raised to what the budget needs (timeLimit).
	TimeLimit time.Duration
	// Iterations bounds each lp_solve call by effort (simplex iterations, ilp.Options);
	// 0 means none. A plan cut short by it depends on the graph alone, not on the
	// machine as one cut short by TimeLimit does.
	Iterations int64
	// LPSolveOnly gives every ILP to lp_solve: no message-passing certificate first
	// (certify.go), which answers most layer ILPs in milliseconds with a plan proven
	// optimal to lp_solve's own gaps. The tests compare the two.
	LPSolveOnly bool
	// Incumbent gives lp_solve, on a memory-bound ILP that the Lagrangian search of the
	// memory rows does not close (lagrange.go), that search's best plan that fits as its
	// incumbent (ilp.Options.Incumbent): the cutoff of its branch and bound, the answer
	// when lp_solve proves nothing better, and never a worse answer at a limit. Off by
	// default: it makes the exhaustive search find plans the fast one misses
	// (docs/DECISIONS.md, "The Lagrangian's plan as lp_solve's incumbent").
	Incumbent bool
	// Known are plans of the graph on this mesh known before the solve (known.go): the
	// plan its layers compose, its solve restricted to their strategies. The best of them
	// that the ILP holds and that fits the budget is lp_solve's incumbent (as Incumbent's
	// plan is), so that the answer, at lp_solve's limit too, is never worse than it in the
	// ILP's objective; where lp_solve proves nothing better, it is the answer.
	Known []KnownPlan
	// NoLPAbove, if positive, does not give lp_solve a memory-bound ILP of more variables
	// than this that the certificate does not close: the Lagrangian search's best plan that
	// fits is the answer (ILPStats.Status "feasible", Solver "lagrange"), else ErrTimeout.
	// For callers whose effort limit (Iterations) would stop lp_solve before its LP root on
	// such an ILP, so that it would end without a plan anyway (the fast search's memory-lean
	// points on 2-D meshes: docs/DECISIONS.md, "gpt39").
	NoLPAbove int
	// LagGap, if positive, accepts on a memory-bound ILP of more than LagGapAbove
	// variables the Lagrangian search's best plan that fits the budget (lagrange.go) when
	// its objective is within LagGap (relative) of the search's lower bound, instead of
	// giving the ILP to lp_solve: the plan's objective is then proven within that fraction
	// of the ILP's optimum under the budget, not within lp_solve's gaps (ILPStats.Status
	// "feasible", Solver "lagrange", Bound the lower bound). An approximation for searches
	// that can spend a bounded error where lp_solve would spend seconds (docs/DECISIONS.md,
	// "Round nine, gpt39b").
	LagGap      float64
	LagGapAbove int
	// WarmStart, if set, is the Result of an earlier Solve of the same graph on the same
	// mesh under the same options but for MemoryBudget, Iterations and TimeLimit: lp_solve
	// then starts from the basis that solve's ILP ended with (warm.go). The plan is an
	// optimum of the same ILP a cold solve finds, of the same cost, though where several
	// plans tie it may be another of them.
	WarmStart *Result
	// Force pins values to a strategy: an index into CandidatesWith(g, lm, opts)[v].
	Force map[ir.ValueID]int
	// ForceSpec pins values to the first candidate whose output has the given layout.
	ForceSpec map[ir.ValueID]mesh.Spec
	// Restrict keeps, in each ILP node, only the strategies that pick for each named member
	// a candidate of one of those Strategy.Names (restrict.go): the strategies other solves
	// chose for the same ops. Unlike Force it leaves merging and fusion as they are.
	Restrict map[ir.ValueID][]string
	// NoMerge keeps every op its own ILP node (followers are merged by default).
	NoMerge bool
	// NoPrune keeps every strategy of every node: no dominance pruning (dominance.go),
	// which cannot change the optimum; the tests compare against it.
	NoPrune bool
	// FullEinsums keeps every strategy of the 4-D einsums (attention's, the experts'): no cut
	// (einsumcut.go), which may change the optimum.
	FullEinsums bool
	// FullConvs keeps the convolutions' reduce-scatters onto a spatial dim: no convolution
	// cut (einsumcut.go, convScatterCut), which may change the optimum.
	FullConvs bool
	// noFill keeps constants read by one op in groups of their own (merge.go's fill);
	// the tests compare against it.
	noFill bool
	// Reshard, if set, shares resharding prices between solves on one logical mesh shape:
	// the caller gives each (submesh, logical mesh) its own. Safe for concurrent solves.
	Reshard *ReshardMemo
	// Candidates, if set, shares the enumerated strategies (and the fusion they were
	// priced with) between solves of the same graph on an equal mesh under the same cost
	// model (candmemo.go): a pure function of those, so the plans do not change. Safe
	// for concurrent solves. Solves with Force or ForceSpec set do not use it.
	Candidates *CandidateMemo
	// SolveLayersOnce makes identical layers share one set of node variables (layers.go): a
	// layer is a model block, as the graph's ir.Block marks say. A graph without marks is
	// solved whole.
	SolveLayersOnce bool
	// Recompute, if set, is how the stage recomputes its activations: the memory model
	// (memory.go) and so the budget then see the recomputing stage's peak.
	Recompute *Recompute
	// sharedCells, where positive, is maxSharedCells for this planner, and its inputs and
	// constants are priced once per layout too: MemoryBound prices every value's layouts
	// once each, as Result.Cost does, so that its objective is at most the plan's cost.
	sharedCells int
	// BlockKeys are the tying keys of the graph's values, BlockKeys of the training step a
	// stage graph was cut from; nil computes them from the graph itself.
	BlockKeys []uint64
	// Microbatches, above 1 with Update set, weighs the objective as a step of that many
	// micro-batches runs it (weights.go): B·t + u, where u is what codegen runs once per
	// step — Update[v] marks an op of the optimizer update (its compute and collectives),
	// Accumulated[v] a value accumulated over the micro-batches (its op's collectives,
	// deferred to the update) — and t the rest, run per micro-batch. Both are per value
	// of the graph (codegen.StepParts of the step a stage graph was cut from); Accumulated
	// may be nil. Result.Cost stays unweighted: one micro-batch plus the step's once part.
	Microbatches int
	Update       []bool
	Accumulated  []bool
}

// timeLimit is each lp_solve call's CPU-time limit: TimeLimit (0: a minute), raised under an
// iteration budget to backstopPerIteration for each of its iterations, so that the budget,
// not the clock, stops every solve that iterates at any sane rate: a solve cut by the clock
// answers by the machine's speed (GPT-15B/32: a 52k-variable range ILP reached 34,079 of
// its 40,000 iterations at 30 CPU s, and its answer was the row's plan; docs/DECISIONS.md,
// "Round twelve, backstop"). The clock stays the net for a solve that stops iterating.
func (o Options) timeLimit() time.Duration {
	limit := o.TimeLimit
	if limit <= 0 {
		limit = time.Minute
	}
	if o.Iterations > 0 {
		limit = max(limit, time.Duration(o.Iterations)*backstopPerIteration)
	}
	return limit
}

// backstopPerIteration is the CPU time per simplex iteration that an iteration budget's
// clock allows: 11 times the dearest rate measured over the suite's rows (0.88 ms, the
// 52k-variable GPT-15B/32 range ILP; 0.35-0.50 ms on 20-29k variables), so 400 CPU s at
// DefaultILPIterations and 30 s at the lean solves' 3,000.
const backstopPerIteration = 10 * time.Millisecond

// ilpOptions are the options of each lp_solve call.
func (o Options) ilpOptions() ilp.Options {
	return ilp.Options{TimeLimit: o.timeLimit(), Iterations: o.Iterations}
}

func (o Options) costModel() (costModel, error) {
	cm := costModel{flops: o.DeviceFLOPS, alpa: o.AlpaCompute}
	if cm.flops == 0 && o.Cluster != nil {
		cm.cluster = o.Cluster
	}
	if cm.flops <= 0 && cm.cluster == nil && !cm.alpa {
		return cm, errors.New("sharding: no device FLOP/s: set Options.Cluster or Options.DeviceFLOPS")
	}
	return cm, nil
}

func (o Options) budget() int64 {
	if o.MemoryBudget > 0 || o.Cluster == nil {
		return o.MemoryBudget
	}
	return o.Cluster.DeviceMemoryBytes
}

// Candidates lists every value's strategies under the unit cost model (1 FLOP/s), the
// list Options.Force indexes when AlpaCompute is off. The graph must verify.
func Candidates(g *ir.Graph, lm *mesh.LogicalMesh) ([][]Strategy, error) {
	return CandidatesWith(g, lm, Options{DeviceFLOPS: 1})
}

// CandidatesWith lists every value's strategies, indexed by ValueID, priced under opts.
// The order and the set depend only on the graph, the mesh and opts.AlpaCompute.
func CandidatesWith(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([][]Strategy, error) {
	cands, _, err := candidates(context.Background(), g, lm, opts)
	return cands, err
}

// candidates is CandidatesWith, stopping with ctx's error once ctx ends: on a large graph
// the enumeration takes seconds. It also returns the kernels the strategies were priced
// with (nil: no fusion).
func candidates(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) ([][]Strategy, *fusion, error) {
	return candidatesCached(ctx, g, lm, opts, nil)
}

// Result is the sharding the pass chose and what it predicts.
type Result struct {
	Mesh *mesh.LogicalMesh `json:"mesh"`
	// Specs[v] is the layout value v is produced in.
	Specs []mesh.Spec `json:"-"`
	// Choice[v] indexes CandidatesWith(g, lm, opts)[v]; Strategies[v] is that strategy.
	Choice     []int      `json:"-"`
	Strategies []Strategy `json:"-"`
	// Collectives are the op-internal collectives and the resharding steps, in value order.
	Collectives []Collective `json:"collectives"`
	Cost        Cost         `json:"cost"`
	// PeakMemory is bytes per device at the worst point of the step (of the recomputing
	// step under Options.Recompute); Budget the limit used (0: none).
	PeakMemory int64 `json:"peak_memory"`
	// Gathered is the part of PeakMemory that the params and state take in the layouts
	// their consumers read beyond their stored ones: copies codegen makes once per step
	// and keeps for the whole step (memory.go).
	Gathered int64    `json:"gathered_memory,omitempty"`
	Budget   int64    `json:"memory_budget"`
	ILP      ILPStats `json:"ilp"`

	warm *warmStart // to start a later solve of this ILP from (Options.WarmStart)
}

// Cost is the predicted time of one step on the mesh, in seconds, split by kind.
// Total equals the ILP's objective, plus Data.
type Cost struct {
	Compute       float64 `json:"compute"`
	Communication float64 `json:"communication"` // op-internal collectives
	Resharding    float64 `json:"resharding"`
	// Data is what a caller prices beside the ILP, which does not see it: the instructions
	// that load, store, fill and accumulate tensors around the ops' kernels (autopar's
	// stage prices). Solve leaves it 0.
	Data  float64 `json:"data,omitempty"`
	Total float64 `json:"total"`
}

// ILPStats describes the integer program solved.
type ILPStats struct {
	Values     int `json:"values"`
	Nodes      int `json:"nodes"` // groups after merging followers
	Variables  int `json:"variables"`
	EdgeVars   int `json:"edge_variables"`
	Rows       int `json:"rows"`
	MemoryRows int `json:"memory_rows"`
	TiedGroups int `json:"tied_groups"` // groups sharing another's variables
	Rounds     int `json:"rounds"`      // solves (memory rows are added lazily)
	// SharedValues are values whose consumers in several groups the ILP prices once per
	// layout they want; PerEdgeValues those it prices once per consumer (too large, see
	// maxSharedCells), so that its objective may exceed Cost.Total by their double counts.
	SharedValues  int `json:"shared_values"`
	PerEdgeValues int `json:"per_edge_values"`
	// Pruned counts the node strategies dominance pruning dropped (dominance.go).
	Pruned int `json:"pruned_strategies"`
	// Cut counts the node strategies the 4-D einsum cut dropped (einsumcut.go).
	Cut       int           `json:"cut_strategies"`
	Status    string        `json:"status"`
	Objective float64       `json:"objective"`
	SolveTime time.Duration `json:"solve_time_ns"`
	// Solver is what answered: "msgpass" (the certificate of certify.go, one round, no
	// memory rows: the unconstrained optimum fit the budget) or "lp_solve".
	Solver string `json:"solver"`
	// Sweeps are the message-passing sweeps run (0: none), whether it answered or not.
	Sweeps int `json:"sweeps,omitempty"`
	// Bound, where Solver is "lagrange" and Status "feasible" (Options.LagGap), is the
	// proven lower bound on the ILP's optimum under the budget that the plan is within
	// LagGap of; 0 otherwise.
	Bound float64 `json:"bound,omitempty"`
}

// Collective is one collective of the plan.
type Collective struct {
	// Value is the value communicated. For an op-internal collective it is the op's result
	// and Consumer is NoValue; for a resharding step Consumer uses Value as operand Slot
	// (Slot -1: Consumer is the param or state an update writes back).
	Value    ir.ValueID      `json:"value"`
	Consumer ir.ValueID      `json:"consumer"`
	Slot     int             `json:"slot"`
	Kind     mesh.Collective `json:"kind"`
	Axes     mesh.AxisSet    `json:"axes"`
	Dim      int             `json:"dim"`
	ToDim    int             `json:"to_dim"`
	Reduce   string          `json:"reduce,omitempty"`
	Bytes    float64         `json:"bytes"`
	Time     float64         `json:"time"`
	// After is the layout once the step is done.
	After mesh.Spec `json:"after"`
}

// Solve chooses a strategy for every op of g on lm at the least predicted time within the
// memory budget. g must verify. Errors: an invalid option, a memory budget no plan meets
// (*MemoryError, naming the minimum), the solver's failure or time limit without a plan.
func Solve(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) (*Result, error) {
	p, err := newPlannerContext(ctx, g, lm, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return p.solve(ctx)
}

// newPlanner generates the candidates, merges followers, applies Force, ties identical
// layers and builds the ILP, ready to solve.
func newPlanner(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) (*planner, error) {
	return newPlannerContext(context.Background(), g, lm, opts)
}

// newPlannerContext is newPlanner, stopping with ctx's error while it enumerates candidates.
func newPlannerContext(ctx context.Context, g *ir.Graph, lm *mesh.LogicalMesh, opts Options) (*planner, error) {
	cands, fu, ent, err := opts.Candidates.candidates(ctx, g, lm, opts)
	if err != nil {
		return nil, err
	}
	if opts.MemoryBudget < 0 {
		return nil, fmt.Errorf("sharding: memory budget must not be negative, got %d", opts.MemoryBudget)
	}
	if err := opts.Recompute.check(g); err != nil {
		return nil, err
	}
	if opts.BlockKeys != nil && len(opts.BlockKeys) != len(g.Values) {
		return nil, fmt.Errorf("sharding: %d block keys for the %d values of %s", len(opts.BlockKeys), len(g.Values), g.Name)
	}
	if opts.Microbatches < 0 {
		return nil, fmt.Errorf("sharding: micro-batch count must not be negative, got %d", opts.Microbatches)
	}
	if opts.Update != nil && len(opts.Update) != len(g.Values) || opts.Accumulated != nil && len(opts.Accumulated) != len(g.Values) {
		return nil, fmt.Errorf("sharding: %d update and %d accumulated marks for the %d values of %s",
			len(opts.Update), len(opts.Accumulated), len(g.Values), g.Name)
	}
	cm, _ := opts.costModel()
	opts.MemoryBudget = opts.budget()
	p := &planner{ctx: ctx, g: g, lm: lm, opts: opts, cm: cm, fu: fu, cands: cands, memo: map[localReshardKey]mesh.Reshard{},
		typeID: make([]int32, len(g.Values)), typeIDs: map[string]int32{}}
	if err := p.checkForce(); err != nil {
		return nil, err
	}
	p.candEnt = ent
	p.weigh()
	p.buildGroupsShared(!opts.NoMerge)
	p.applyForce()
	p.restrict()
	p.cutEinsums()
	p.tie()
	p.pruneDominated()
	p.buildILP()
	if err := p.checkCostRange(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.live = liveness(g, opts.Recompute)
	return p, nil
}

// maxCost is the largest time, in seconds, the ILP's objective may hold: about 30,000
// years. lp_solve reads 1e30 as infinite, and long before that the smallest costs vanish
// in rounding; only a cluster with absurd rates (a FLOP/s or a bandwidth near zero) gets here.
const maxCost = 1e12

// checkCostRange refuses an objective the solver cannot weigh, naming the cost and the
// cluster's rates, instead of letting lp_solve report a meaningless infeasibility.
func (p *planner) checkCostRange() error {
	for _, t := range p.prob.Objective {
		if c := t.Coef; math.IsNaN(c) || math.Abs(c) > maxCost {
			cl := p.opts.Cluster
			why := ""
			if cl != nil {
				why = fmt.Sprintf(": is cluster %q's device FLOP/s (%g) or a bandwidth (%g, %g bytes/s) far too small?",
					cl.Name, cl.DeviceFLOPS, cl.IntraHostBandwidth, cl.InterHostBandwidth)
			}
			return fmt.Errorf("sharding: %s costs %.3g s on mesh %s, more than the %.0e s the solver can weigh%s",
				p.prob.VarName(t.Var), c, p.lm, maxCost, why)
		}
	}
	return nil
}

func (p *planner) forced(v ir.ValueID) bool {
	_, a := p.opts.Force[v]
	_, b := p.opts.ForceSpec[v]
	return a || b
}

// checkForce turns ForceSpec into indices and checks every forced index.
func (p *planner) checkForce() error {
	force := map[ir.ValueID]int{}
	for v, k := range p.opts.Force {
		if v < 0 || int(v) >= len(p.cands) {
			return fmt.Errorf("sharding: forced value %d is not in the graph", v)
		}
		if k < 0 || k >= len(p.cands[v]) {
			return fmt.Errorf("sharding: %s has %d strategies, cannot force index %d", p.g.Value(v).Name, len(p.cands[v]), k)
		}
		force[v] = k
	}
	for v, s := range p.opts.ForceSpec {
		if v < 0 || int(v) >= len(p.cands) {
			return fmt.Errorf("sharding: forced value %d is not in the graph", v)
		}
		k := -1
		for i := range p.cands[v] {
			if p.cands[v][i].Out.Equal(s) {
				k = i
				break
			}
		}
		if k < 0 {
			return fmt.Errorf("sharding: no strategy of %s produces %s", p.g.Value(v).Name, s)
		}
		force[v] = k
	}
	p.opts.Force = force
	return nil
}

// applyForce keeps, in each group with a forced member, the strategies that pick it.
func (p *planner) applyForce() {
	ids := make([]ir.ValueID, 0, len(p.opts.Force))
	for v := range p.opts.Force {
		ids = append(ids, v)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, v := range ids {
		gr := p.groups[p.groupOf[v]]
		var keep []groupStrategy
		for _, gs := range gr.strats {
			if int(gs.pick[p.memberIdx[v]]) == p.opts.Force[v] {
				keep = append(keep, gs)
			}
		}
		if len(keep) == 0 {
			panic("sharding: a forced leader strategy vanished from its group")
		}
		gr.strats = keep
	}
}
