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

// randomGraph builds a small random graph: two or three leaves, then ops drawn from
// matmul, add, relu, transpose, reduce_sum and mul on 4×4 and 4×8 tensors, at most n
// values in all. Some values are updates of the params, as in a training step.
func randomGraph(t *testing.T, rng *rand.Rand, n int) *ir.Graph {
	return randomGraphConst(t, rng, n, false)
}

// randomGraphConst is randomGraph; with consts, an add or mul may instead take a fresh
// constant of its operand's shape as its second operand (read by that op alone).
func randomGraphConst(t *testing.T, rng *rand.Rand, n int, consts bool) *ir.Graph {
	b := newGB(t, "rand")
	vals := []ir.ValueID{b.param("w", 4, 4), b.input("x", 8, 4)}
	if rng.Intn(2) == 0 {
		vals = append(vals, b.param("v", 4, 8))
	}
	for len(b.g.Values) < n {
		a := vals[rng.Intn(len(vals))]
		c := vals[rng.Intn(len(vals))]
		sa, sc := b.g.Value(a).Type.Shape, b.g.Value(c).Type.Shape
		var id ir.ValueID
		switch k := rng.Intn(6); {
		case k == 0 && sa.Rank() == 2 && sc.Rank() == 2 && sa[1] == sc[0]:
			id = b.op(ir.OpMatMul, "mm", nil, a, c)
		case k == 1 && consts && rng.Intn(2) == 0:
			k := b.op(ir.OpConstant, "k", ir.Attrs{}.With("value", 0.5).With("type", b.g.Value(a).Type))
			id = b.op([]ir.Op{ir.OpAdd, ir.OpMul}[rng.Intn(2)], "kop", nil, a, k)
		case k == 1 && sa.Equal(sc):
			id = b.op(ir.OpAdd, "add", nil, a, c)
		case k == 2:
			id = b.op(ir.OpRelu, "relu", nil, a)
		case k == 3 && sa.Rank() == 2:
			id = b.transpose("tr", a)
		case k == 4 && sa.Rank() == 2:
			id = b.op(ir.OpReduceSum, "sum", ir.Attrs{}.With("axes", []int{rng.Intn(2)}), a)
		case k == 5 && sa.Equal(sc):
			id = b.op(ir.OpMul, "mul", nil, a, c)
		default:
			continue
		}
		vals = append(vals, id)
	}
	last := vals[len(vals)-1]
	b.g.AddOutput(last, ir.Pos{})
	if w := b.g.Value(0); b.g.Value(last).Type.Equal(w.Type) && last != 0 {
		b.g.AddUpdate(0, last, ir.Pos{})
	}
	require.NoError(t, ir.Verify(b.g))
	return b.g
}

// bruteCost prices a choice of one strategy per value directly from the candidates and
// mesh.ReshardCost, sharing nothing with the ILP's construction: each value is resharded
// once into each distinct layout its consumers (and its update target) want.
func bruteCost(g *ir.Graph, lm *mesh.LogicalMesh, cands [][]Strategy, pick []int) float64 {
	c := 0.0
	seen := map[string]bool{}
	reshard := func(v ir.ValueID, to mesh.Spec) {
		if k := fmt.Sprint(v, to); !seen[k] {
			seen[k] = true
			c += mustReshard(g, lm, v, cands[v][pick[v]].Out, to)
		}
	}
	for id := range g.Values {
		s := &cands[id][pick[id]]
		c += s.Compute + s.Comm
		for i, a := range g.Values[id].Args {
			reshard(a, s.In[i])
		}
	}
	for _, u := range g.Updates {
		reshard(u.Value, cands[u.Target][pick[u.Target]].Out)
	}
	return c
}

var bruteMemo = map[string]float64{}

func mustReshard(g *ir.Graph, lm *mesh.LogicalMesh, v ir.ValueID, from, to mesh.Spec) float64 {
	t := g.Value(v).Type
	key := fmt.Sprint(lm.Shape, lm.Alpha, lm.Beta, t, from, to)
	if c, ok := bruteMemo[key]; ok {
		return c
	}
	r, err := mesh.ReshardCost(lm, t.Shape, t.DType.Size(), from, to)
	if err != nil {
		panic(err)
	}
	bruteMemo[key] = r.Time
	return r.Time
}

// TestILPMatchesBruteForce: on random graphs of up to 8 values on 1×2 and 2×2 meshes, the
// ILP's optimum (without merging, so over every strategy of every op) equals the cheapest
// of all strategy combinations, and the solver's assignment passes ilp.Evaluate with the
// plan's own cost as objective.
func TestILPMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	done := 0
	for trial := 0; done < 24 && trial < 400; trial++ {
		m := []*mesh.LogicalMesh{uniform(t, 1, 2), uniform(t, 2, 2)}[trial%2]
		lm := m.WithAxisCost(0, 2, 0.5) // unequal axes so the choice of axis matters
		g := randomGraph(t, rng, 4+rng.Intn(5))
		opts := Options{DeviceFLOPS: 0.5, NoMerge: true}
		cands, err := CandidatesWith(g, lm, opts)
		require.NoError(t, err)
		combos := 1
		for _, c := range cands {
			combos *= len(c)
		}
		if combos > 8000 {
			continue
		}
		best := bruteBest(g, lm, cands)
		p, err := newPlanner(g, lm, opts)
		require.NoError(t, err)
		r, err := p.solve(context.Background())
		require.NoError(t, err)
		name := fmt.Sprintf("trial %d on %s: %s", trial, lm, g)
		assert.InDelta(t, best, r.Cost.Total, 1e-6*max(1, best), name)
		assert.InDelta(t, best, r.ILP.Objective, 1e-6*max(1, best), name)
		ev := ilp.Evaluate(p.prob, solutionOf(t, p, r))
		require.NoError(t, ev.Err(), name)
		assert.InDelta(t, r.Cost.Total, ev.Objective, 1e-6*max(1, best), name)
		done++
	}
	assert.Equal(t, 24, done, "too few random graphs small enough to enumerate")
}

func bruteBest(g *ir.Graph, lm *mesh.LogicalMesh, cands [][]Strategy) float64 {
	pick := make([]int, len(cands))
	best := -1.0
	var rec func(i int)
	rec = func(i int) {
		if i == len(cands) {
			if c := bruteCost(g, lm, cands, pick); best < 0 || c < best {
				best = c
			}
			return
		}
		for k := range cands[i] {
			pick[i] = k
			rec(i + 1)
		}
	}
	rec(0)
	return best
}

// TestMergedILPMatchesBruteForceOverGroups: with followers merged, the ILP's optimum equals
// the cheapest combination of group strategies, priced value by value.
func TestMergedILPMatchesBruteForceOverGroups(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	done := 0
	for trial := 0; done < 12 && trial < 400; trial++ {
		lm := uniform(t, 2, 2).WithAxisCost(1, 3, 0.25)
		g := randomGraph(t, rng, 5+rng.Intn(4))
		p, err := newPlanner(g, lm, Options{DeviceFLOPS: 0.5})
		require.NoError(t, err)
		combos := 1
		for _, gr := range p.groups {
			combos *= len(gr.strats)
		}
		if combos > 8000 || len(p.groups) == len(g.Values) {
			continue
		}
		choice := make([]int, len(p.groups))
		best := -1.0
		var rec func(i int)
		rec = func(i int) {
			if i == len(choice) {
				pick := make([]int, len(g.Values))
				for id := range g.Values {
					pick[id] = int(p.pick(ir.ValueID(id), choice[p.groupOf[id]]))
				}
				if c := bruteCost(g, lm, p.cands, pick); best < 0 || c < best {
					best = c
				}
				return
			}
			for k := range p.groups[i].strats {
				choice[i] = k
				rec(i + 1)
			}
		}
		rec(0)
		r, err := p.solve(context.Background())
		require.NoError(t, err)
		assert.InDelta(t, best, r.Cost.Total, 1e-6*max(1, best), "trial %d: %s", trial, g)
		done++
	}
	assert.Equal(t, 12, done)
}
