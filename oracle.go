package autopar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	memory int64

	stages map[[2]int]*stageGraph
	solved map[solveKey]*stageSolution
	err    error // the first error that was not a question of memory
	solves int
}

type stageGraph struct {
	g    *ir.Graph
	ids  []ir.ValueID // the step's values the stage computes, in graph order
	hash string
}

type solveKey struct {
	hash    string
	sub     dp.Submesh
	logical dp.Logical
}

type stageSolution struct {
	res  *sharding.Result
	cost dp.StageCost
	ok   bool
}

func newOracle(ctx context.Context, step *ir.Graph, lay *passes.Layering, c *mesh.Cluster, limit time.Duration, memory int64) *oracle {
	return &oracle{ctx: ctx, step: step, lay: lay, c: c, limit: limit, memory: memory,
		stages: map[[2]int]*stageGraph{}, solved: map[solveKey]*stageSolution{}}
}

// StageCost implements dp.Oracle.
func (o *oracle) StageCost(start, end int, s dp.Submesh, l dp.Logical) (dp.StageCost, bool) {
	sol := o.solve(start, end, s, l)
	return sol.cost, sol.ok
}

func (o *oracle) solve(start, end int, s dp.Submesh, l dp.Logical) *stageSolution {
	sg, err := o.stage(start, end)
	if err != nil {
		o.note(err)
		return &stageSolution{}
	}
	key := solveKey{sg.hash, s, l}
	if sol, ok := o.solved[key]; ok {
		return sol
	}
	sol := o.solveStage(sg, s, l)
	o.solved[key] = sol
	return sol
}

func (o *oracle) solveStage(sg *stageGraph, s dp.Submesh, l dp.Logical) *stageSolution {
	lm, err := mesh.NewLogicalMesh(o.c, mesh.Submesh{Hosts: s.Hosts, Devices: s.Devices}, l.DP, l.MP)
	if err != nil {
		o.note(err)
		return &stageSolution{}
	}
	opts := sharding.Options{Cluster: o.c, MemoryBudget: o.memory, TimeLimit: o.limit, SolveLayersOnce: true,
		Filter: lowerable(lm)}
	o.solves++
	res, err := sharding.Solve(o.ctx, sg.g, lm, opts)
	var me *sharding.MemoryError
	if errors.As(err, &me) {
		// Nothing fits one micro-batch: price the fastest plan anyway and let the DP's
		// memory check reject it, so that its error names the memory that would fit.
		opts.MemoryBudget = 1 << 62
		res, err = sharding.Solve(o.ctx, sg.g, lm, opts)
	}
	if err != nil {
		o.note(fmt.Errorf("stage %s on %s: %w", sg.g.Name, lm, err))
		return &stageSolution{}
	}
	weights := weightBytes(sg.g, res)
	return &stageSolution{res: res, ok: true, cost: dp.StageCost{
		Time:        res.Cost.Total,
		WeightBytes: float64(weights),
		ActBytes:    float64(max(0, res.PeakMemory-weights)),
	}}
}

func (o *oracle) note(err error) {
	if o.err == nil && o.ctx.Err() == nil {
		o.err = err
	}
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
	return sum
}

// stage cuts layers [start, end) out of the step, once per range.
func (o *oracle) stage(start, end int) (*stageGraph, error) {
	if sg, ok := o.stages[[2]int{start, end}]; ok {
		return sg, nil
	}
	var ids []ir.ValueID
	for i, l := range o.lay.Of {
		if l >= start && l < end && !o.step.Values[i].Op.IsLeaf() {
			ids = append(ids, ir.ValueID(i))
		}
	}
	g, err := passes.Subgraph(o.step, fmt.Sprintf("layers%d-%d", start, end-1), ids)
	if err != nil {
		return nil, err
	}
	sg := &stageGraph{g: g, ids: ids, hash: structureHash(g)}
	o.stages[[2]int{start, end}] = sg
	return sg, nil
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
