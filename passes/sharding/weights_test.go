package sharding

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// bruteCostW prices a choice of one strategy per value as a step of b micro-batches weighs
// it, from the candidates and mesh.ReshardCost, sharing nothing with the ILP's
// construction: an update op's compute and collectives once, an accumulated value's
// collectives once and its compute b times, every other op's b times; each value resharded
// once into each distinct layout its consumers (and its update target) want, once per step
// if the value is a param or state or only update ops read it, else b times.
func bruteCostW(g *ir.Graph, lm *mesh.LogicalMesh, cands [][]Strategy, pick []int, b float64, update, acc []bool) float64 {
	perMB := make([]bool, len(g.Values))
	for id := range g.Values {
		for _, a := range g.Values[id].Args {
			perMB[a] = perMB[a] || !update[id]
		}
	}
	c := 0.0
	seen := map[string]bool{}
	reshard := func(v ir.ValueID, to mesh.Spec) {
		if k := fmt.Sprint(v, to); !seen[k] {
			seen[k] = true
			w := 1.0
			if op := g.Value(v).Op; perMB[v] && op != ir.OpParam && op != ir.OpState {
				w = b
			}
			c += w * mustReshard(g, lm, v, cands[v][pick[v]].Out, to)
		}
	}
	for id := range g.Values {
		s := &cands[id][pick[id]]
		switch {
		case update[id]:
			c += s.Compute + s.Comm
		case acc[id]:
			c += b*s.Compute + s.Comm
		default:
			c += b * (s.Compute + s.Comm)
		}
		for i, a := range g.Values[id].Args {
			reshard(a, s.In[i])
		}
	}
	for _, u := range g.Updates {
		reshard(u.Value, cands[u.Target][pick[u.Target]].Out)
	}
	return c
}

// randomMarks marks about a quarter of the ops as update ops and a quarter of the rest as
// accumulated.
func randomMarks(rng *rand.Rand, g *ir.Graph) (update, acc []bool) {
	update, acc = make([]bool, len(g.Values)), make([]bool, len(g.Values))
	for id := range g.Values {
		if g.Values[id].Op.IsLeaf() {
			continue
		}
		switch rng.Intn(4) {
		case 0:
			update[id] = true
		case 1:
			acc[id] = true
		}
	}
	return update, acc
}

// TestWeightedILPMatchesBruteForce: with the objective weighed for b micro-batches, on
// random graphs with random update and accumulated marks on 1×2 and 2×2 meshes — every
// strategy of every op (no merging, no pruning), followers merged, and merged with
// dominance pruning and constants folded — the ILP's optimum equals the least weighted cost
// over all combinations (of candidates, or of group strategies when merged), its
// assignment passes ilp.Evaluate at that objective, and Result.Cost stays the unweighted
// cost of the plan chosen. The weights change the chosen plan in some trials.
func TestWeightedILPMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(17))
	done, changed := 0, 0
	for trial := 0; done < 36 && trial < 800; trial++ {
		m := []*mesh.LogicalMesh{uniform(t, 1, 2), uniform(t, 2, 2)}[trial%2]
		lm := m.WithAxisCost(0, 2, 0.5)
		g := randomGraphConst(t, rng, 4+rng.Intn(5), trial%4 == 3)
		update, acc := randomMarks(rng, g)
		b := []int{2, 4, 16}[rng.Intn(3)]
		mode := trial % 3 // 0 every strategy, 1 merged, 2 merged and pruned
		opts := Options{DeviceFLOPS: 0.5, NoMerge: mode == 0, Microbatches: b, Update: update, Accumulated: acc}
		if mode < 2 {
			opts = full(opts)
		}
		name := fmt.Sprintf("trial %d (mode %d, B %d) on %s: %s", trial, mode, b, lm, g)
		ref, err := newPlanner(g, lm, full(Options{DeviceFLOPS: 0.5, NoMerge: mode == 0}))
		require.NoError(t, err)
		combos := 1
		for _, gr := range ref.groups {
			combos *= len(gr.strats)
		}
		if combos > 4000 {
			continue
		}
		// Brute force over the reference's groups (every candidate when unmerged).
		choice := make([]int, len(ref.groups))
		best := -1.0
		var rec func(i int)
		rec = func(i int) {
			if i == len(choice) {
				pick := make([]int, len(g.Values))
				for id := range g.Values {
					pick[id] = int(ref.pick(ir.ValueID(id), choice[ref.groupOf[id]]))
				}
				if c := bruteCostW(g, lm, ref.cands, pick, float64(b), update, acc); best < 0 || c < best {
					best = c
				}
				return
			}
			for k := range ref.groups[i].strats {
				choice[i] = k
				rec(i + 1)
			}
		}
		rec(0)
		p, err := newPlanner(g, lm, opts)
		require.NoError(t, err)
		r, err := p.solve(context.Background())
		require.NoError(t, err, name)
		tol := 1e-6 * max(1, best)
		assert.InDelta(t, best, r.ILP.Objective, tol, name)
		assert.InDelta(t, best, bruteCostW(g, lm, p.cands, r.Choice, float64(b), update, acc), tol, name)
		assert.InDelta(t, bruteCost(g, lm, p.cands, r.Choice), r.Cost.Total, tol, name)
		ev := ilp.Evaluate(p.prob, solutionOf(t, p, r))
		require.NoError(t, ev.Err(), name)
		assert.InDelta(t, best, ev.Objective, tol, name)
		plain, err := ref.solve(context.Background())
		require.NoError(t, err, name)
		if bruteCostW(g, lm, ref.cands, plain.Choice, float64(b), update, acc) > best+tol {
			changed++
		}
		done++
	}
	assert.Equal(t, 36, done, "too few random graphs small enough to enumerate")
	assert.Positive(t, changed, "the weights never changed the optimum")
}

// TestWeightedOneMicrobatchIsUnweighted: B = 1, or no update marks, leaves the objective
// t + u, the plain cost.
func TestWeightedOneMicrobatchIsUnweighted(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for trial := range 6 {
		lm := uniform(t, 2, 2).WithAxisCost(0, 2, 0.5)
		g := randomGraph(t, rng, 6)
		update, acc := randomMarks(rng, g)
		plain, err := Solve(context.Background(), g, lm, Options{DeviceFLOPS: 0.5})
		require.NoError(t, err)
		for _, opts := range []Options{
			{DeviceFLOPS: 0.5, Microbatches: 1, Update: update, Accumulated: acc},
			{DeviceFLOPS: 0.5, Microbatches: 8},
		} {
			r, err := Solve(context.Background(), g, lm, opts)
			require.NoError(t, err)
			assert.InDelta(t, plain.ILP.Objective, r.ILP.Objective, 1e-9*max(1, plain.ILP.Objective), "trial %d", trial)
			assert.Equal(t, plain.Choice, r.Choice, "trial %d", trial)
		}
	}
	_, err := Solve(context.Background(), randomGraph(t, rng, 5), uniform(t, 1, 2), Options{DeviceFLOPS: 1, Microbatches: 2, Update: []bool{true}})
	assert.ErrorContains(t, err, "1 update and 0 accumulated marks for the 5 values")
	_, err = Solve(context.Background(), randomGraph(t, rng, 5), uniform(t, 1, 2), Options{DeviceFLOPS: 1, Microbatches: -1})
	assert.ErrorContains(t, err, "micro-batch count must not be negative")
}
