package autopar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
)

// oracle prices a pipeline stage for dp.Solve with the intra-operator sharding ILP of the
// stage's subgraph on the candidate logical mesh. Layer ranges whose subgraphs have the
// same structure (the middle layers of a transformer) share one solve: the cache is keyed
// by a structural hash, not by the range.
type oracle struct {
	ctx    context.Context
	step   *ir.Graph
	lay    *passes.Layering
	c      *mesh.Cluster
	limit  time.Duration
	iters  int64 // each full solve's iteration limit (Options.ILPIterations); < 0: none
	lpOnly bool  // Options.LPSolveOnly
	memory int64
	lagGap float64 // sharding.Options.LagGap of its solves (lagGap; 0: lp_solve's gaps)

	parts  *codegen.StepParts // of step, made by the first stage cut
	keys   []uint64           // sharding.BlockKeys of step, likewise
	stages map[[2]int]*stageGraph
	err    error // the first error that was not a question of memory
	*shared
	// canonical skips logical meshes (a, b) with a > b inside one host: both axes of a host
	// cost the same, so (a, b) prices exactly as (b, a) (TestHostMeshesMirror). Off when
	// the caller pins logical meshes.
	canonical bool
	// leastPlans: a one-layer stage that cannot fit is priced by its plan of least memory,
	// solved, not by hopeless's bound (explain shows what each mesh would need).
	leastPlans bool
	// remat is the recomputation mode (RematAuto, RematNone, RematFull); pinned, when set,
	// fixes the choice per layer range [start, end) (a saved plan's stages; see choice).
	remat  string
	pinned map[[2]int]int
	fwd    []bool // the step's forward values (forwardValues)
	// localOnly marks the step's values no op of another layer reads (memOf, bound.go)
	localOnly []bool
	lastFwd   ir.ValueID // the step's last forward op (memOf, bound.go)
	// ranges are the memory floors' facts of each range of layers (rangeMem, bound.go)
	ranges map[[2]int]rangeMem
	// mb is the micro-batch count B the stage ILPs weigh their objective for: B·t + u
	// (sharding.Options.Microbatches); 0 or 1 weighs t + u.
	mb int

	// fast prices ranges by composing their layers' solutions (compose.go).
	fast       bool
	optimistic bool // price unsolved ranges by their lower bounds (compose.go, lower)
	// lazy: layers are solved only when an optimistic plan runs them (bound.go, settle);
	// until then they have no points and lower prices them by their bounds.
	lazy      bool
	allMeshes []meshKey // the meshes the DP asks for (set by settle)
	infos     []*layerInfo
	// firstLayers are later layers' graphs as a range from layer 0 weighs them
	// (weighedLayer): this count's, as infos
	firstLayers map[int]*stageGraph
	composedAt  map[rangeKey]composedCost
	// leanAt: in the lazy search, the ranges (on their meshes) an optimistic plan ran,
	// the only ones compose solves memory-lean points for (compose.go, leanFor)
	leanAt map[rangeKey]bool
	// leanAll: settle found no optimistic plan, so compose leans every range as outside the
	// lazy search (markLean(nil))
	leanAll bool
	// composedEver: every range composedAt priced with a plan during the search, false
	// when any of its prices was inexact (countComposed; solveLayers clears composedAt)
	composedEver map[rangeKey]bool
	exactAt      map[rangeKey]composedCost // ranges the fast search has solved exactly (exactly)
	// restricted are the ranges exactly priced by their composed plan (restrict.go); their
	// exactAt entries are not exact, so the optimistic plan bounds them instead.
	restricted map[rangeKey]*stageSolution
	// duals are the dual bounds of whole-network ranges' ILPs in w·t + u (bound.go,
	// refute; −Inf: none), which raise their optimistic prices (dualRaised)
	duals map[rangeKey]float64
	// peaks are ranges' peak floors, plain, whole and layer by layer (bound.go, peakFloors)
	peaks map[rangeKey][3]float64
	// lagDuals are whole-network ranges' bounds under the memory in w·t + u, plain and
	// recomputing (timefloor.go, lagRefute; −Inf: none), which raise their optimistic
	// prices (dualRaised)
	lagDuals map[rangeKey][2]float64
	lagCut   map[rangeKey][2]float64 // a lagDuals search stopped at its target: the target, its μ (timefloor.go)
	// timeFloors are pipeline stages' floors on t under the memory, plain and recomputing
	// (pipefloor.go, timeRefute; −Inf: none), which raise their optimistic prices
	timeFloors map[rangeKey][2]float64
	timeCuts   map[rangeKey]*timeCut   // the timeFloors searches a target stopped, to go on (pipefloor.go)
	noRestrict bool                    // recost solves every stage by its range ILP (unrestrict)
	recvAt     map[recvKey]dp.Receives // Receives'
	cross      []crossValue            // the step's values read across layers (received)
	// top is the step of the fastest plan known when this count's turn began (searchAll;
	// +Inf: none)
	top float64
}

// shared is what the oracles of one compile (one per micro-batch count) share: solutions
// are keyed by the structural hash of their graph, which holds its shapes, so a layer whose
// micro-batch shape repeats across counts is solved once.
type shared struct {
	solved    map[solveKey]*stageSolution
	points    map[solveKey][]layerPoint
	leaned    map[solveKey]bool
	leanStuck map[leanSpot]bool // lean solves stopped at their limit (compose.go, leanSpot)
	// firstPts are points of a first stage's later layers from their weight-1 solve
	// answered without lp_solve (compose.go, firstPoints): nil where it gave none
	firstPts map[solveKey][]layerPoint
	// cutoff, when > 0, is the step time (the best plan of another micro-batch count, plus
	// boundMargin) at or above which this count's optimistic bound loses (searchAll):
	// settle stops there and sets outbid (compile.go, attempt.finish).
	cutoff      float64
	outbid      bool
	reshardMemo map[reshardMemoKey]float64
	solves      atomic.Int64
	maxVars     atomic.Int64 // the most variables of any ILP solved
	nComposed   atomic.Int64 // layer ranges the fast search priced by composition
	nInexact    atomic.Int64 // of them, those not proven equal to their range's ILP
	skipped     atomic.Int64 // micro-batch counts the bound skipped (boundOrder)
	// bounds are the layers' optimistic prices without an ILP (bound.go, layerBound)
	bounds map[solveKey]boundCost
	// relaxed are layer solves without the memory rows (bound.go, solveRelaxed): nil
	// while running, a solution without ok when it gave no bound
	relaxed map[solveKey]*stageSolution

	memoMu sync.Mutex
	memos  map[meshKey]*sharding.ReshardMemo
	cands  sharding.CandidateMemo // one for all meshes: its size bounds its memory
}

func newShared() *shared {
	return &shared{solved: map[solveKey]*stageSolution{}, points: map[solveKey][]layerPoint{}, leaned: map[solveKey]bool{}, leanStuck: map[leanSpot]bool{}, firstPts: map[solveKey][]layerPoint{},
		reshardMemo: map[reshardMemoKey]float64{}, memos: map[meshKey]*sharding.ReshardMemo{}, bounds: map[solveKey]boundCost{},
		relaxed: map[solveKey]*stageSolution{}}
}

type stageGraph struct {
	g       *ir.Graph
	ids     []ir.ValueID // the step's values the stage computes, in graph order
	remat   *stageRemat
	hash    string
	single  bool    // the stage is one layer
	weights int64   // bytes of its params (twice: their gradients) and optimizer state
	flops   float64 // of one micro-batch
	// once and acc mark, per value of g, an op of the update (run once per step) and a
	// value accumulated over the micro-batches (codegen.StepParts); feed a data input of
	// the step (loaded per micro-batch), not a value another stage sends.
	once, acc, feed []bool
	keys            []uint64 // per value of g, its step value's sharding.BlockKeys: ties blocks the stage cuts
	// bounder gives its layer's kernel bounds on each mesh (bound.go, boundOf), made once
	bounder *sharding.Bounder
	// mb is the micro-batch count its ILP weighs the per-micro-batch part by (B·t + u,
	// sharding/weights.go): the oracle's B for a first stage, 1 otherwise (oracle.weightOf).
	mb int
	// trades: its ILP's optimum depends on the weight (weighted), so a solution at one
	// weight bounds another weight's only through t + u (oracle.lower, reweighed).
	trades bool
	// kinds is the step part of each value (stage), shape its graph's structureHash: with
	// the weight, its hash (hashAt).
	kinds, shape string
}

type solveKey struct {
	hash    string
	sub     mesh.Submesh
	logical mesh.LogicalShape
}

type stageSolution struct {
	res  *sharding.Result // nil when pruned: the stage cannot fit, whatever its sharding
	cost dp.StageCost     // without recomputation
	// stepComm is the communication of cost.Step: the gradients' collectives and resharding.
	stepComm float64
	// remats are the costs recomputing: the whole stage at once, then layer by layer (see
	// remat.go); a pruned stage's are its lower bound.
	remats []dp.StageCost
	ok     bool
	err    error
	// exact: a relaxed solve (bound.go, solveRelaxed) whose plan fits the memory, so
	// that it is the solve under the memory rows too
	exact bool
	// dual: a relaxed solve of a layer on the whole cluster answered by its dual bound
	// alone (relaxdual.go, solveRelaxedJob): no plan, cost a bound in w·t + u
	dual  bool
	bound float64
}

// costFor is the cost the DP sees for a stage in recomputation mode mode: the plain cost,
// the recomputing ones, or (auto) the plain one offering the recomputing ones.
func (s *stageSolution) costFor(mode string) dp.StageCost {
	var c dp.StageCost
	if !s.ok {
		return c // no price: the caller reads ok, and the error is noted (oracle.solve)
	}
	switch mode {
	case RematNone:
		return s.cost
	case RematFull:
		c = s.remats[0]
		c.Remat = s.remats[1:]
	default:
		c = s.cost
		c.Remat = s.remats
	}
	return c
}

// choice numbers a stage's way to run as costFor's choices do: 0 plain, 1 recomputing the
// whole stage, 2 layer by layer.
func choice(recompute, layers bool) int {
	switch {
	case !recompute:
		return 0
	case !layers:
		return 1
	}
	return 2
}

// chosen is the cost of way i (see choice).
func (s *stageSolution) chosen(i int) dp.StageCost {
	if i == 0 || !s.ok {
		return s.cost
	}
	return s.remats[i-1]
}

// pruneFactor: a stage whose weights alone, spread perfectly over its devices, exceed this
// many times the device memory is not solved. Its cost is then a lower bound (the DP
// rejects it for memory); a plan that needs less than this factor times the memory is
// priced exactly, so a memory error's minimum is exact up to it.
const pruneFactor = 4

// DefaultILPIterations is Options.ILPIterations' default: lp_solve's simplex iterations,
// branch and bound included, allowed each sharding ILP. About the effort the former 30 s
// wall-clock limit allowed on a quiet core (0.5–0.75 ms an iteration on the recorded
// GPT-1.3B ILPs of 6.5–20k variables), but the same stop on any machine under any load.
// The most any ILP of the recorded GPT-1.3B corpus took to a proven optimum was 10,629
// (docs/DECISIONS.md, "lp_solve settings over a recorded corpus").
const DefaultILPIterations = 40000

// leanIterations bounds each ILP of a memory-lean layer solution by lp_solve's simplex
// iterations: about 3 s of the largest layer ILPs (GPT-1.3B on 2×2, 27k variables, ~1 ms an
// iteration) on a quiet core, and, unlike the 3 s wall-clock limit it replaces, the same
// stop on any machine under any load, so the search and its ILP count are deterministic.
const leanIterations = 3000

// leastMinPeak: in the lazy search, a stage that fits in no way under the device memory
// (its least footprint, recomputing where the mode lets it, is over it) is priced by the
// min-peak ILP's plan (sharding.MemoryError.Plan), not by a re-solve at that footprint
// ("least"): the DP rejects every way of every plan of that footprint, and every range
// composed from it (a range holds at least its layer's weights and activations), so which
// such plan prices it changes no plan (TestLeastMinPeak). The re-solve is a layer ILP
// under a budget that binds: 5-7 CPU s each on MoE-27B/32's counts 4 and 8 (2x4, 2x2;
// docs/DECISIONS.md, "moe27"). The exhaustive search and explain (leastPlans) re-solve.
var leastMinPeak = true

// leanLPVars: a memory-lean layer ILP on a two-dimensional mesh of more variables than
// this, which lp_solve would start cold (no basis of the layer's fastest solve: the
// certificate answered it), is answered by the Lagrangian search's best plan that fits,
// not given to lp_solve (sharding.Options.NoLPAbove): at leanIterations lp_solve never got
// through the LP root of one (GPT-15B/32: 14 such solves of 16.9–28.1k variables, every
// one ended without a plan, 59 of the row's 69 lean CPU s; docs/DECISIONS.md, "gpt39").
// Wide-ResNet's 2-D layers (7–11k variables) stay with lp_solve.
const leanLPVars = 12000

// lagGap and lagGapVars: a memory-bound stage ILP of more than lagGapVars variables whose
// Lagrangian search (passes/sharding lagrange.go) found a plan that fits within lagGap of
// its proven lower bound takes that plan (sharding.Options.LagGap), not lp_solve's
// optimum: its ILP objective is then proven within 0.1 % of the optimum. On GPT-6.7B/16
// the two dearest such solves (11.6 and 6.4 CPU s of lp_solve) had gaps of 0.011 % and
// 0.064 % (docs/DECISIONS.md, "Round nine, gpt39b"). Smaller ILPs (every tiny model's)
// stay with lp_solve: they are cheap.
const (
	lagGap     = 1e-3
	lagGapVars = 2000
)

func newOracle(ctx context.Context, step *ir.Graph, lay *passes.Layering, c *mesh.Cluster, limit time.Duration, memory int64, sh *shared) *oracle {
	if sh == nil {
		sh = newShared()
	}
	return &oracle{ctx: ctx, step: step, lay: lay, c: c, limit: limit, iters: DefaultILPIterations, memory: memory, lagGap: lagGap,
		stages: map[[2]int]*stageGraph{}, shared: sh, composedAt: map[rangeKey]composedCost{}, exactAt: map[rangeKey]composedCost{},
		remat: RematAuto, fwd: forwardValues(step), recvAt: map[recvKey]dp.Receives{}, restricted: map[rangeKey]*stageSolution{},
		duals: map[rangeKey]float64{}}
}

// StageCost implements dp.Oracle: the stage's own price; its receives are priced apart
// (Receives), where the search places it.
func (o *oracle) StageCost(start, end int, s mesh.Submesh, l mesh.LogicalShape) (dp.StageCost, bool) {
	return o.stageCost(start, end, s, l)
}

// recvKey is a stage's receives' memo key: they do not depend on its logical mesh.
type recvKey struct {
	start, end int
	sub        mesh.Submesh
}

// Receives implements dp.Receiver: what stage [start, end) on s receives per micro-batch
// from other stages (received), each value as one piece per device of an even share of
// the tensor (codegen lands a transfer on all of the receiver's devices, see codegen's
// absorb), priced by the point-to-point cost (mesh.Cluster.SendRecvCost) from a stage on
// the receiver's own host (Same: the stage's own mesh stands for it) and from another
// host (Cross: a device on a host the stage does not use), split by the stage that makes
// the value: layer start−1's (the previous stage; for a first stage the last layer's, the
// last stage's) is Before, layer end's (the next stage; for a last stage layer 0's) is
// After, any other's is Far, priced by the cheaper link it may take (recvLinks). The DP
// adds Same or Cross where its stages sit on the ring (package dp), as priceTransfers
// prices the plan's transfers once they sit there: a lower bound on the plan's RecvTime,
// since a device receives at least one piece of each value and the stage's slowest device
// at least the even share, and equal to it where the pieces are those even shares (the
// rows measured, docs/DECISIONS.md, branch hosts). Under GPipe and 1F1B a stage's
// receives are on its path per micro-batch (forward activations, backward gradients): Σ
// over stages counts each boundary's transfer once, as one micro-batch's fill and drain
// crosses it, and the slowest stage's count B times.
func (o *oracle) Receives(start, end int, s mesh.Submesh) dp.Receives {
	k := recvKey{start, end, s}
	if x, ok := o.recvAt[k]; ok {
		return x
	}
	var x dp.Receives
	if recv := o.received(start, end); len(recv) > 0 {
		if lm, err := mesh.NewLogicalMesh(o.c, s, 1, s.NumDevices()); err == nil {
			n := float64(lm.Size())
			links := recvLinks(o.c, s, lm)
			other := links[len(links)-1] // another host's device, or lm if there is none
			L := o.lay.L
			for _, v := range recv {
				b := float64(v.bytes) / n
				same, cross := o.c.SendRecvCost(lm, lm, b), o.c.SendRecvCost(other, lm, b)
				switch {
				case v.layer == start-1 || start == 0 && v.layer == L-1:
					x.Before.Same += same
					x.Before.Cross += cross
				case v.layer == end || end == L && v.layer == 0:
					x.After.Same += same
					x.After.Cross += cross
				default:
					c := math.Inf(1)
					for _, from := range links {
						c = min(c, o.c.SendRecvCost(from, lm, b))
					}
					x.Far += c
				}
			}
		}
	}
	o.recvAt[k] = x
	return x
}

// recvEstimate is stage [start, end) on (s, l)'s receive price where it may sit, before
// the search places it: each part by the cheaper link it may take (recvLinks), a lower
// bound on what Receives prices it at anywhere.
func (o *oracle) recvEstimate(start, end int, s mesh.Submesh, l mesh.LogicalShape) float64 {
	x := o.Receives(start, end, s)
	if s.Hosts == 1 && s.Devices < o.c.DevicesPerHost || o.c.Hosts == 1 {
		return x.Far + min(x.Before.Same, x.Before.Cross) + min(x.After.Same, x.After.Cross)
	}
	return x.Far + x.Before.Cross + x.After.Cross
}

// recvLinks are the meshes a stage on submesh s (laid out as lm) can receive from, as
// far as the link's price goes (mesh.Cluster.SendRecvCost: intra-host numbers only when
// both meshes are on one and the same host): a stage that fills its hosts (s spans whole
// hosts, as every submesh of more than one host does) shares no host with the disjoint
// submesh of any other stage, so every piece it receives crosses hosts; a stage on part
// of one host may receive from the rest of its host (lm itself stands for it) or from
// another host, the last of them where there is one.
func recvLinks(c *mesh.Cluster, s mesh.Submesh, lm *mesh.LogicalMesh) []*mesh.LogicalMesh {
	var out []*mesh.LogicalMesh
	if s.Hosts == 1 && s.Devices < c.DevicesPerHost {
		out = append(out, lm)
	}
	if c.Hosts > s.Hosts {
		// One device on a host lm does not use: its link to lm crosses hosts.
		other := mesh.DeviceID((c.HostOf(lm.Devices[0]) + s.Hosts) % c.Hosts * c.DevicesPerHost)
		if from, err := mesh.NewLogicalMeshAt(c, mesh.Submesh{Hosts: 1, Devices: 1}, other, 1, 1); err == nil {
			out = append(out, from)
		}
	}
	if len(out) == 0 {
		out = append(out, lm) // one host, all of it: the stage has no other stage to receive from
	}
	return out
}

func (o *oracle) stageCost(start, end int, s mesh.Submesh, l mesh.LogicalShape) (dp.StageCost, bool) {
	if o.mirrored(s, l) {
		return dp.StageCost{}, false
	}
	if o.fast {
		if c, ok := o.exactAt[rangeKey{start, end, s, l}]; ok && (c.exact || !o.optimistic) {
			return c.cost, c.ok
		}
		if o.optimistic {
			c, ok := o.lower(start, end, s, l)
			if !ok {
				return c, ok
			}
			c = o.rangeFloor(c, start, end, s, l)        // the range's relaxed solve, where one ran (restrict.go)
			c = o.dualRaised(c, start, end, s, l)        // the range's dual bound, where refute ran (bound.go)
			c = o.lagRaised(c, start, end, s, l)         // its bounds under the memory (timefloor.go)
			return o.timeRaised(c, start, end, s, l), ok // a pipeline stage's floors on t (pipefloor.go)
		}
		c := o.composed(start, end, s, l)
		return c.cost, c.ok
	}
	sol := o.solve(start, end, s, l)
	if i, ok := o.pinned[[2]int{start, end}]; ok && sol.ok {
		return sol.chosen(i), true
	}
	return sol.costFor(o.remat), sol.ok
}

func (o *oracle) solve(start, end int, s mesh.Submesh, l mesh.LogicalShape) *stageSolution {
	if sol, ok := o.restricted[rangeKey{start, end, s, l}]; ok {
		return sol
	}
	sg, err := o.stage(start, end)
	if err != nil {
		o.note(err)
		return &stageSolution{}
	}
	key := solveKey{sg.hash, s, l}
	sol, ok := o.solved[key]
	if !ok && o.ctx.Err() != nil {
		return &stageSolution{} // cancelled: the DP stops at its next check, so no ILP runs
	}
	if !ok {
		sol = o.solveStageKnown(sg, s, l, nil, o.rangeStart(sg, s, l))
		o.solved[key] = sol
	}
	if sol.err != nil {
		o.note(sol.err)
	}
	return sol
}

func (o *oracle) mirrored(s mesh.Submesh, l mesh.LogicalShape) bool {
	return o.canonical && s.Hosts == 1 && l[0] > l[1]
}

// prefetch prices every stage the DP will ask for — every layer range on every submesh and
// logical mesh; in the fast search every layer — on all cores, so that the DP, which asks
// one at a time, finds them solved. Each solve is deterministic, so the order they run in
// changes nothing. progress, if set, is called after each solve with the count done and
// the total, one call at a time.
func (o *oracle) prefetch(layers int, c dp.Cluster, progress func(done, total int)) {
	o.run(o.jobs(layers, c), progress)
	if o.fast {
		o.applyAligned(o.run(o.alignJobs(o.meshes(c)), nil))
	}
}

// jobs lists the solves prefetch runs, marking them in o.solved so that another oracle of
// the same compile does not list them again.
func (o *oracle) jobs(layers int, c dp.Cluster) []job {
	var jobs []job
	for k := 0; k < layers; k++ {
		for i := k + 1; i <= layers; i++ {
			if o.fast && i > k+1 {
				break // the fast search solves single layers and composes the rest
			}
			sg, err := o.stage(k, i)
			if err != nil {
				continue // reported when the DP asks
			}
			for _, mk := range o.meshes(c) {
				key := solveKey{sg.hash, mk.sub, mk.logical}
				if _, ok := o.solved[key]; !ok {
					o.solved[key] = nil
					jobs = append(jobs, job{key: key, sg: sg})
				}
			}
		}
	}
	return jobs
}

// meshes lists the (submesh, logical mesh) pairs the DP may ask for.
func (o *oracle) meshes(c dp.Cluster) []meshKey {
	var out []meshKey
	for _, s := range dp.Submeshes(c) {
		for _, l := range dp.LogicalShapes(s) {
			if !o.mirrored(s, l) {
				out = append(out, meshKey{s, l})
			}
		}
	}
	return out
}

type job struct {
	key   solveKey
	sg    *stageGraph
	force map[ir.ValueID]mesh.Spec // layouts pinned (compose.go's aligned solves)
	base  solveKey                 // for an aligned solve, the layer's own key
	// relaxed: the layer's ILP without its memory rows (bound.go, solveRelaxed)
	relaxed bool
	// first: the layer's points for a first stage only, its ILP under the memory answered
	// without lp_solve (compose.go, firstPoints)
	first bool
}

// run solves jobs on all cores and returns them; their keys are in o.solved as nil
// placeholders.
func (o *oracle) run(jobs []job, progress func(done, total int)) []job {
	sols := make([]*stageSolution, len(jobs))
	known := make([]*rangeStart, len(jobs)) // found before the solves start: they change nothing it is found in
	for j := range jobs {
		if !jobs[j].relaxed && !jobs[j].first {
			known[j] = o.rangeStart(jobs[j].sg, jobs[j].key.sub, jobs[j].key.logical)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range goruntime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := int(next.Add(1)) - 1; j < len(jobs) && o.ctx.Err() == nil; j = int(next.Add(1)) - 1 {
				switch {
				case jobs[j].relaxed:
					sols[j] = o.solveRelaxedJob(jobs[j].sg, jobs[j].key.sub, jobs[j].key.logical)
				case jobs[j].first:
					sols[j] = o.solveStageOpts(jobs[j].sg, jobs[j].key.sub, jobs[j].key.logical, o.memory, nil, nil, nil, max(firstLPVars, 1), 0)
				default:
					sols[j] = o.solveStageKnown(jobs[j].sg, jobs[j].key.sub, jobs[j].key.logical, jobs[j].force, known[j])
				}
				if progress != nil {
					mu.Lock()
					done++
					progress(done, len(jobs))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for j, sol := range sols {
		switch {
		case jobs[j].first && sol != nil && sol.ok && sol.res != nil:
			o.firstPts[jobs[j].key] = []layerPoint{pointOf(jobs[j].sg, sol)}
		case jobs[j].first:
			o.firstPts[jobs[j].key] = nil // none: the layer's own solve, if asked again (unsolved)
		case jobs[j].relaxed && sol == nil:
			delete(o.relaxed, jobs[j].key)
		case jobs[j].relaxed:
			if sol.dual {
				o.dualPrice(jobs[j].sg, jobs[j].key, sol)
			}
			o.relaxed[jobs[j].key] = sol
			if sol.exact {
				o.solved[jobs[j].key] = sol // the memory rows would not have bound it
			}
		case sol == nil:
			delete(o.solved, jobs[j].key) // cancelled: solved on demand, if ever
		default:
			o.solved[jobs[j].key] = sol
		}
	}
	return jobs
}

// solveStage prices one stage on one logical mesh. It is safe to call concurrently.
func (o *oracle) solveStage(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape) *stageSolution {
	return o.solveStageBudget(sg, s, l, o.memory, nil, nil, nil)
}

// solveStageBudget is solveStage under a memory budget of its own, with the values of
// force pinned to their layouts; warm, if set, is an earlier solution of the same stage
// on the same mesh whose ILP lp_solve starts from (sharding.Options.WarmStart); restrict,
// if set, the strategies its layers chose (sharding.Options.Restrict, restrict.go).
func (o *oracle) solveStageBudget(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, memory int64, force map[ir.ValueID]mesh.Spec, warm *sharding.Result, restrict map[ir.ValueID][]string) *stageSolution {
	return o.solveStageOpts(sg, s, l, memory, force, warm, restrict, 0, 0)
}

// solveStageOpts is solveStageBudget with sharding.Options.NoLPAbove set to noLP where
// positive (firstPoints) and, where iters is positive, lp_solve's effort capped at iters
// with the Lagrangian search's plan as its incumbent (a restricted solve, restrict.go).
func (o *oracle) solveStageOpts(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, memory int64, force map[ir.ValueID]mesh.Spec, warm *sharding.Result, restrict map[ir.ValueID][]string, noLP int, iters int64) *stageSolution {
	return o.solveStageWith(sg, s, l, memory, force, warm, restrict, noLP, iters, nil)
}

// solveStageKnown is solveStage with the values of force pinned to their layouts and, for
// a range of the fast search, lp_solve started from the plans known of it (start, nil:
// none; knownplan.go).
func (o *oracle) solveStageKnown(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, force map[ir.ValueID]mesh.Spec, start *rangeStart) *stageSolution {
	return o.solveStageWith(sg, s, l, o.memory, force, nil, nil, 0, 0, start)
}

// solveStageWith is solveStageOpts with lp_solve started from start (nil: none).
func (o *oracle) solveStageWith(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, memory int64, force map[ir.ValueID]mesh.Spec, warm *sharding.Result, restrict map[ir.ValueID][]string, noLP int, iters int64, start *rangeStart) *stageSolution {
	lm, err := mesh.NewLogicalMesh(o.c, s, l[0], l[1])
	if err != nil {
		return &stageSolution{err: err}
	}
	n := float64(lm.Size())
	if floor := float64(sg.weights) / n; o.memory > 0 && floor > pruneFactor*float64(o.memory) {
		c := dp.StageCost{Time: o.c.ComputeTime(sg.flops) / n, WeightBytes: floor}
		r := c
		r.Recompute = true // as bounded: recomputation frees no weights
		l := r
		l.Checkpoints = true
		return &stageSolution{ok: true, cost: c, remats: []dp.StageCost{r, l}}
	}
	// A stage that will recompute has its budget checked against its recomputing peak
	// (layer by layer, the leaner way at one micro-batch): under full always, under auto
	// when no plain plan fits one micro-batch, so that the stage must recompute.
	var marks *sharding.Recompute
	if o.remat == RematFull {
		marks = sg.remat.layers.marks
	}
	opts := o.solveOptions(sg, s, l, memory)
	opts.ForceSpec, opts.Recompute, opts.WarmStart, opts.Restrict = force, marks, warm, restrict
	if start != nil {
		opts.Known, opts.Incumbent = start.known, true
	}
	if memory != o.memory {
		// A memory-lean point of the fast search (compose.go) is an option, not a price
		// the plan depends on: a feasible plan at a short limit serves. The limit is
		// effort, not time, so that the answer does not depend on the load.
		opts.Iterations = leanIterations
		if meshFactor(l) > 4 {
			opts.NoLPAbove = leanLPVars
		}
	}
	if noLP > 0 {
		opts.NoLPAbove = noLP
	}
	if iters > 0 {
		if opts.Iterations == 0 || opts.Iterations > iters {
			opts.Iterations = iters
		}
		opts.Incumbent = true
	}
	o.solves.Add(1)
	kind := "plain"
	if noLP > 0 {
		kind = "first"
	}
	res, err := o.traced(sg, s, lm, opts, kind)
	if res != nil {
		atomicMax(&o.maxVars, int64(res.ILP.Variables))
	}
	var me *sharding.MemoryError
	if errors.As(err, &me) && o.remat == RematAuto && memory == o.memory {
		opts.Recompute = sg.remat.layers.marks
		o.solves.Add(1)
		res, err = o.traced(sg, s, lm, opts, "recompute") // priced as every stage is, data instructions included
		if res != nil {
			atomicMax(&o.maxVars, int64(res.ILP.Variables))
		}
	}
	if errors.As(err, &me) && !o.leastPlans {
		// me.Minimum: the least footprint as the stage would run, recomputing where the
		// mode lets it (the solve above).
		if sol := hopeless(o.c, sg, n, me.Minimum, o.memory); sol != nil {
			return sol
		}
	}
	if errors.As(err, &me) && me.Plan != nil && (memory != o.memory || leastMinPeak && o.lazy && !o.leastPlans) {
		// A memory-lean point (compose.go) under the layer's least footprint: the plan of
		// that footprint the min-peak ILP found is the point, a real plan at its own time
		// and peak, instead of a capped re-solve at the footprint (which, at the lean
		// iteration limit, found no plan on the big layers) and the fastest plan again.
		// In the lazy search, also a stage that fits in no way under the device memory
		// (leastMinPeak): every plan of that footprint is rejected by the DP alike.
		res, err = me.Plan, nil
	} else if errors.As(err, &me) {
		// Nothing fits one micro-batch. Price the plan of least memory (the sharding pass
		// names its peak) and let the DP's memory check reject it, so that the DP's error
		// names the memory that would fit; failing that, the fastest plan.
		opts.MemoryBudget = me.Minimum
		if res, err = o.traced(sg, s, lm, opts, "least"); err != nil {
			opts.MemoryBudget = 1 << 62
			if res, err = o.traced(sg, s, lm, opts, "fastest"); err != nil {
				err = me // the real budget's error: the fallback's own budget means nothing to the user
			}
		}
	}
	if err != nil {
		if errors.As(err, &me) {
			me.Plan = nil // kept with the solution for its message only: not a plan's worth of heap
		}
		return &stageSolution{err: fmt.Errorf("stage %s on %s: %w", sg.g.Name, lm, err)}
	}
	return o.priced(sg, lm, res, opts.Recompute != nil)
}

// priced is the stageSolution of res, a solve of sg on lm (recomputing: under
// sharding.Options.Recompute).
func (o *oracle) priced(sg *stageGraph, lm *mesh.LogicalMesh, res *sharding.Result, recomputing bool) *stageSolution {
	var err error
	weights := weightBytes(sg.g, res)
	stepCompute, stepComm := sg.stepPart(o.c, res)
	step := stepCompute + stepComm
	peak := res.PeakMemory // the plain stage's, unless solved recomputing
	if recomputing {
		if peak, err = res.PeakWith(sg.g, nil); err != nil {
			return &stageSolution{err: fmt.Errorf("stage %s on %s: %w", sg.g.Name, lm, err)}
		}
	}
	plain := dp.StageCost{
		Time:        max(0, res.Cost.Total-step),
		Step:        step,
		WeightBytes: float64(weights),
		ActBytes:    float64(max(0, peak-weights)),
	}
	remats, err := sg.remat.costs(sg.g, res, plain)
	if err != nil {
		return &stageSolution{err: fmt.Errorf("stage %s on %s: %w", sg.g.Name, lm, err)}
	}
	return &stageSolution{res: res, ok: true, cost: plain, stepComm: stepComm, remats: remats}
}

// stageTrace, set by benchmarks only (-stage-trace), wraps each sharding solve of the
// oracle: label says which stage, mesh, micro-batch count, budget and kind of solve it is
// (plain, recompute, least, fastest; lean budgets say so), run runs it and says how it
// ended.
var stageTrace func(label string, run func() string)

// traced is sg.solve under stageTrace.
func (o *oracle) traced(sg *stageGraph, s mesh.Submesh, lm *mesh.LogicalMesh, opts sharding.Options, kind string) (*sharding.Result, error) {
	if stageTrace == nil {
		return sg.solve(o.ctx, lm, opts)
	}
	if opts.MemoryBudget != o.memory && kind == "plain" {
		kind = "lean"
	}
	var res *sharding.Result
	var err error
	stageTrace(fmt.Sprintf("B%d,%s,%.8s,%dh%dd,%dx%d,%.2f,%s", o.mb, sg.g.Name, sg.hash, s.Hosts, s.Devices, lm.Shape[0], lm.Shape[1],
		float64(opts.MemoryBudget)/(1<<30), kind), func() string {
		res, err = sg.solve(o.ctx, lm, opts)
		var me *sharding.MemoryError
		switch {
		case errors.As(err, &me):
			return fmt.Sprintf("memory error (least %.2f GiB)", float64(me.Minimum)/(1<<30))
		case err != nil:
			return fmt.Sprintf("%q", err.Error())
		}
		return fmt.Sprintf("ok %.6g s peak %.2f GiB rounds %d by %s", res.Cost.Total, float64(res.PeakMemory)/(1<<30), res.ILP.Rounds, res.ILP.Solver)
	})
	return res, err
}

// hopeless prices a one-layer stage that cannot come near the device memory, whatever its
// sharding and recomputation, without the ILPs the fallback solves for its plan of least
// memory (the dearest of a Wide-ResNet compile: its micro-batch counts of up to 768 images
// need hundreds of GiB per layer); nil when it might. minimum is the sharding pass's least
// footprint of the stage as it would run (MemoryError of solveStageBudget's last solve:
// recomputing layer by layer under RematAuto and RematFull, plain under RematNone; exact,
// or a lower bound).
//
// Every plan of the stage, priced as solveStageBudget prices it (remat.go), needs at least
// that with one micro-batch in flight: plain, its peak, which recomputation only lowers;
// recomputing, Memory(1) is the plan's recomputing peak, and a one-layer stage recomputes
// the same one segment either way (whole or layer by layer). Past pruneFactor times the
// memory only (so that, as with the weights, a memory error's least memory that would fit
// is exact up to that factor), the stage is priced as a pruned one (res nil): time and
// weights lower bounds (compute spread perfectly, weights spread evenly), activations
// making up the footprint, so that the DP rejects every way to run it; a composed range
// holding it holds its weights and activations too (compose.go's withRemat) and is
// rejected as well. TestHopelessStage checks these premises against the solved plans.
func hopeless(c *mesh.Cluster, sg *stageGraph, n float64, minimum, memory int64) *stageSolution {
	m := float64(minimum)
	if !sg.single || memory <= 0 || m <= pruneFactor*float64(memory) {
		return nil // solved, so that a memory error names what would fit
	}
	floor := float64(sg.weights) / n
	act := max(0, m-floor)
	plain := dp.StageCost{Time: c.ComputeTime(sg.flops) / n, WeightBytes: floor, ActBytes: act}
	whole := plain
	whole.Recompute, whole.ActBytes, whole.OnceBytes = true, 0, act
	layered := whole
	layered.Checkpoints = true
	return &stageSolution{ok: true, cost: plain, remats: []dp.StageCost{whole, layered}}
}

// countComposed adds the oracle's composed prices to the compile's counts.
func (o *oracle) countComposed() {
	for _, exact := range o.composedEver {
		o.nComposed.Add(1)
		if !exact {
			o.nInexact.Add(1)
		}
	}
	clear(o.composedEver)
}

// solveOptions are the options every sharding solve of the search runs sg under on (s, l)
// with the given budget: the compile's limits, sg's weights and block keys, and the memos
// the solves on that mesh share.
func (o *oracle) solveOptions(sg *stageGraph, s mesh.Submesh, l mesh.LogicalShape, memory int64) sharding.Options {
	return sharding.Options{Cluster: o.c, MemoryBudget: memory, TimeLimit: o.limit, Iterations: max(o.iters, 0),
		LPSolveOnly: o.lpOnly, SolveLayersOnce: true, BlockKeys: sg.keys, Reshard: o.memo(s, l),
		Candidates: o.candMemo(), Microbatches: sg.mb, Update: sg.once, Accumulated: sg.acc,
		LagGap: o.lagGap, LagGapAbove: lagGapVars}
}

// memo returns the resharding prices shared by the solves on (s, l).
func (o *oracle) memo(s mesh.Submesh, l mesh.LogicalShape) *sharding.ReshardMemo {
	o.memoMu.Lock()
	defer o.memoMu.Unlock()
	k := meshKey{s, l}
	m, ok := o.memos[k]
	if !ok {
		m = &sharding.ReshardMemo{}
		o.memos[k] = m
	}
	return m
}

// candMemo returns the candidate strategies shared by the solves (its key holds the mesh).
func (o *oracle) candMemo() *sharding.CandidateMemo { return &o.cands }

type meshKey struct {
	sub     mesh.Submesh
	logical mesh.LogicalShape
}

func atomicMax(x *atomic.Int64, v int64) {
	for {
		old := x.Load()
		if v <= old || x.CompareAndSwap(old, v) {
			return
		}
	}
}

func (o *oracle) note(err error) {
	if o.err == nil && o.ctx.Err() == nil {
		o.err = err
	}
}

// stepPart is the part of a solved stage's cost that codegen runs once per step, not per
// micro-batch: the ops of the update, the collectives that resolve the partial sums of the
// accumulated gradients (their ops' own collectives, which codegen defers to the update),
// every resharding into an update op or into a param's new value, and the reshardings of
// params and state into the layouts their ops read (the prologue's, once). The rest of
// res.Cost.Total is the forward and backward of one micro-batch. It returns the step
// part's compute (with the step's data instructions, dataTime) and its communication.
func (sg *stageGraph) stepPart(c *mesh.Cluster, res *sharding.Result) (compute, comm float64) {
	_, compute = sg.dataTime(c, res)
	for id := range sg.g.Values {
		s := &res.Strategies[id]
		switch {
		case sg.once[id]:
			compute += s.Compute
			comm += s.Comm
		case sg.acc[id]:
			comm += s.Comm
		}
	}
	for _, c := range res.Collectives {
		if sg.perStep(c) && c.Consumer != ir.NoValue {
			comm += c.Time
		}
	}
	return compute, comm
}

// perStep reports whether codegen runs collective c once per step: an op's own collective
// of an update op or of an accumulated value, or a resharding into an update op, into a
// param's new value (Slot −1) or of a param or state (in the prologue).
func (sg *stageGraph) perStep(c sharding.Collective) bool {
	if c.Consumer == ir.NoValue {
		return sg.once[c.Value] || sg.acc[c.Value]
	}
	op := sg.g.Value(c.Value).Op
	return c.Slot < 0 || sg.once[c.Consumer] || op == ir.OpParam || op == ir.OpState
}

// weightBytes is what a device holds for the whole step whatever the micro-batch: its
// shards of the params, of their gradient accumulators (one per param) and of the
// optimizer state.
func weightBytes(g *ir.Graph, res *sharding.Result) int64 {
	var sum int64
	for i := range g.Values {
		v := &g.Values[i]
		if v.Op != ir.OpParam && v.Op != ir.OpState {
			continue
		}
		b, err := res.Mesh.LocalBytes(v.Type.Shape, v.Type.DType.Size(), res.Specs[i])
		if err != nil {
			continue
		}
		if v.Op == ir.OpParam {
			b *= 2
		}
		sum += b
	}
	return sum + res.Gathered // the copies in other layouts, held once per step too
}

// stage cuts layers [start, end) out of the step, once per range.
func (o *oracle) stage(start, end int) (*stageGraph, error) {
	if sg, ok := o.stages[[2]int{start, end}]; ok {
		return sg, nil
	}
	if o.parts == nil {
		parts, err := codegen.Parts(o.step)
		if err != nil {
			return nil, err
		}
		o.parts = parts
		o.keys = sharding.BlockKeys(o.step)
	}
	var ids []ir.ValueID
	for i, l := range o.lay.Of {
		// A dead op is left out: codegen runs nothing for it, so it has no price.
		if l >= start && l < end && !o.step.Values[i].Op.IsLeaf() && !o.parts.Dead[i] {
			ids = append(ids, ir.ValueID(i))
		}
	}
	g, err := passes.Subgraph(o.step, fmt.Sprintf("layers%d-%d", start, end-1), ids)
	if err != nil {
		return nil, err
	}
	sg := &stageGraph{g: g, ids: ids, single: end-start == 1, flops: g.TotalFLOPs(), remat: newStageRemat(o.step, o.fwd, o.lay.Of, g),
		once: make([]bool, len(g.Values)), acc: make([]bool, len(g.Values)), feed: make([]bool, len(g.Values)),
		keys: make([]uint64, len(g.Values))}
	var kinds strings.Builder // the step part of each value, which the price depends on
	for i := range g.Values {
		if id, ok := o.step.Lookup(g.Values[i].Name); ok {
			sg.once[i], sg.acc[i], sg.keys[i] = o.parts.Update[id], o.parts.Accumulated[id], o.keys[id]
			sg.feed[i] = g.Values[i].Op == ir.OpInput && o.step.Value(id).Op == ir.OpInput
		}
		kinds.WriteByte("-uaU"[btoi(sg.once[i])+2*btoi(sg.acc[i])])
		if sg.feed[i] { // loaded per micro-batch, where a value of another stage is not
			kinds.WriteByte('d')
		}
	}
	sg.trades = weighted(g, sg.once, sg.acc)
	sg.kinds, sg.shape = kinds.String(), structureHash(g)
	sg.mb = o.weightOf(start)
	sg.hash = sg.hashAt(sg.mb)
	for i := range g.Values {
		switch v := &g.Values[i]; v.Op {
		case ir.OpParam:
			sg.weights += 2 * v.Type.Bytes()
		case ir.OpState:
			sg.weights += v.Type.Bytes()
		}
	}
	g.Lookup("") // builds the name index now, before solves share the graph
	o.stages[[2]int{start, end}] = sg
	return sg, nil
}

// hashAt is the stage's solve key hash when its ILP weighs a micro-batch mb times: B is
// in it where the solution depends on it (trades).
func (sg *stageGraph) hashAt(mb int) string {
	kinds := sg.kinds
	if mb > 1 && sg.trades {
		// The ILP weighs this stage's parts by B (sharding/weights.go): its solution is B's.
		kinds += fmt.Sprintf(" B%d", mb)
	}
	k := sha256.Sum256([]byte(kinds))
	return sg.shape + hex.EncodeToString(k[:8])
}

// crossValue is a value of the step that layers other than its own read per micro-batch.
type crossValue struct {
	bytes int64
	layer int   // its producer's
	users []int // the other layers that read it per micro-batch, ascending
}

// received lists each value layers [start, end) receive per micro-batch from other
// layers, with its bytes and its producer's layer: made by an op of another layer (a constant or iota is filled where it is
// read, not sent), not once per step (an update op's, an accumulated gradient: codegen
// sends those from the update block), and read by an op of the range that runs per
// micro-batch (not an update op). Activations from earlier layers, gradients from later
// ones.
func (o *oracle) received(start, end int) []crossValue {
	if o.cross == nil {
		parts, err := codegen.Parts(o.step)
		if err != nil {
			return nil
		}
		o.cross = []crossValue{}
		users := map[ir.ValueID]map[int]bool{}
		for i := range o.step.Values {
			if parts.Update[i] || parts.Dead[i] || o.step.Values[i].Op.IsLeaf() {
				continue
			}
			for _, a := range o.step.Values[i].Args {
				v := o.step.Value(a)
				if v.Op.IsLeaf() || v.Op == ir.OpConstant || v.Op == ir.OpIota || parts.Update[a] || parts.Accumulated[a] ||
					o.lay.Of[a] == o.lay.Of[i] {
					continue
				}
				if users[a] == nil {
					users[a] = map[int]bool{}
				}
				users[a][o.lay.Of[i]] = true
			}
		}
		for i := range o.step.Values {
			us := users[ir.ValueID(i)]
			if us == nil {
				continue
			}
			c := crossValue{bytes: o.step.Values[i].Type.Bytes(), layer: o.lay.Of[i]}
			for l := range us {
				c.users = append(c.users, l)
			}
			sort.Ints(c.users)
			o.cross = append(o.cross, c)
		}
	}
	var out []crossValue
	for _, c := range o.cross {
		if c.layer >= start && c.layer < end {
			continue
		}
		for _, l := range c.users {
			if l >= start && l < end {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// weightOf is the micro-batch count the ILP of a stage starting at layer start weighs
// its per-micro-batch part by: B for a first stage (a one-stage plan, a pipeline's first
// stage), whose step part u ends the step (dp: Σ t + (B−1)·max t + u₀); 1 for a later
// stage, whose u the search takes as hidden behind the first stage's tail. For a later
// stage t alone would be exact and B·t + u nearer than t + u, but a range ILP weighed so
// trades per-step resharding for per-micro-batch time across its layer boundaries in ways
// no composition of its layers' own solutions reaches, which the fast search then cannot
// follow (docs/DECISIONS.md).
func (o *oracle) weightOf(start int) int {
	if start == 0 {
		return o.mb
	}
	return 1
}

// weighted reports whether a stage's ILP depends on the micro-batch count: whether some of
// its costs run once per step (an update op, an accumulated value, a param or state's
// resharding) while others run per micro-batch. A stage without them weighs every cost by
// B alike, and its solution is the same at every count.
func weighted(g *ir.Graph, once, acc []bool) bool {
	for i := range g.Values {
		if once[i] || acc[i] || g.Values[i].Op == ir.OpParam || g.Values[i].Op == ir.OpState {
			return true
		}
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// structureHash identifies a graph up to the names of its values: ops, attributes, types
// and the wiring by position.
func structureHash(g *ir.Graph) string {
	h := sha256.New()
	var b strings.Builder
	for i := range g.Values {
		v := &g.Values[i]
		b.Reset()
		b.WriteString(v.Op.String())
		for _, a := range v.Args {
			b.WriteString(" %" + strconv.Itoa(i-int(a)))
		}
		for _, a := range v.Attrs {
			b.WriteString(" " + a.Name + "=" + ir.FormatAttrValue(a.Value))
		}
		b.WriteString(" : " + v.Type.String() + "\n")
		h.Write([]byte(b.String()))
	}
	for _, out := range g.Outputs {
		fmt.Fprintf(h, "output %d\n", out.Value)
	}
	for _, u := range g.Updates {
		fmt.Fprintf(h, "update %d %d\n", u.Target, u.Value)
	}
	return hex.EncodeToString(h.Sum(nil))
}
