package sharding

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ilp"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// planPrice prices a plan as codegen runs it, from its Result and the definitions alone,
// weighed as the objective weighs a step (weights.go): every value's compute and
// collectives, and every value's resharding into each distinct layout its consumers (and
// its update's target) read, once, plus the spill (fusedSpill) once where a consumer in
// the value's kernel reads that layout. The reshardings are priced by mesh.ReshardCost,
// not by the planner's memo. With every weight 1 it is Result.Cost.Total.
func planPrice(p *planner, r *Result) float64 {
	c := 0.0
	for id := range p.g.Values {
		c += p.ownCost(ir.ValueID(id), &r.Strategies[id])
	}
	type once struct {
		v    ir.ValueID
		spec string
	}
	made, spilled := map[once]bool{}, map[once]bool{}
	read := func(from, to ir.ValueID, slot int, want mesh.Spec) {
		k := once{from, want.String()}
		t := mustReshard(p.g, p.lm, from, r.Specs[from], want)
		if !made[k] {
			made[k] = true
			c += p.wReshard[from] * t
		}
		if t > 0 && slot >= 0 && p.fu.internal(from, to) && !spilled[k] {
			spilled[k] = true
			c += p.wReshard[from] * p.fusedSpill(from, r.Strategies[from].Memory, []mesh.Spec{want}, []int{0})
		}
	}
	for id := range p.g.Values {
		for i, a := range p.g.Values[id].Args {
			read(a, ir.ValueID(id), i, r.Strategies[id].In[i])
		}
	}
	for _, u := range p.g.Updates {
		read(u.Value, u.Target, -1, r.Specs[u.Target])
	}
	return c
}

// randomChoice draws a strategy for every representative group; tied groups take their
// representative's.
func randomChoice(p *planner, rng *rand.Rand) []int {
	choice := make([]int, len(p.groups))
	for gi := range p.groups {
		if p.rep[gi] == gi {
			choice[gi] = rng.Intn(len(p.groups[gi].strats))
		}
	}
	for gi := range p.groups {
		choice[gi] = choice[p.rep[gi]]
	}
	return choice
}

// objectiveAndPrice is the ILP's objective at choice's assignment (ilp.Evaluate: the
// least point of the edge and shared variables the one-hot binaries leave) and the plan's
// price (planPrice); it checks Result.Cost.Total against planPrice where nothing is weighed.
func objectiveAndPrice(t *testing.T, p *planner, choice []int, at string) (float64, float64) {
	ev := ilp.Evaluate(p.prob, p.assignment(choice))
	require.NoError(t, ev.Err(), at)
	r := p.result(choice, ILPStats{})
	price := planPrice(p, r)
	if p.wB == 1 {
		require.InDelta(t, price, r.Cost.Total, 1e-9*price, "%s: Result.Cost.Total is the plan's price", at)
	}
	return ev.Objective, price
}

// TestObjectiveIsPlanPrice: the sharding ILP's objective at any plan's assignment equals
// the plan's price as Result counts it and codegen runs it (planPrice), on random plans of
// the tiny models' training steps, with and without kernel fusion (p3.16xlarge, cpu), on
// 1-D and 2-D meshes, unweighed and weighed as a step of four micro-batches with layers
// tied, 20 random plans each, where every value is priced once per layout
// (Options.sharedCells, as MemoryBound's planner does); with Solve's own pricing (inputs, constants and iotas per consumer, the
// largest values per edge: ILPStats.PerEdgeValues) the objective is at least the price.
// Before round eleven (docs/DECISIONS.md, "Round eleven, objcost") the objective missed a
// follower's read of a group member other than its leader (up to 6.4 % under the price on
// wresnet-tiny without fusion) and counted twice a layout made inside a group and read
// outside it, or read by two followers (up to 1.6 % over).
func TestObjectiveIsPlanPrice(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	models := []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"}
	shapes := [][2]int{{1, 4}, {2, 2}}
	plans := 20
	if testing.Short() {
		shapes, plans = [][2]int{{2, 2}}, 5
	}
	compared, above := 0, 0
	for _, name := range models {
		g := tinyStep(t, name)
		update := make([]bool, len(g.Values))
		acc := make([]bool, len(g.Values))
		for _, u := range g.Updates {
			update[u.Value] = true
			for _, a := range g.Value(u.Value).Args {
				acc[a] = g.Value(a).Op != ir.OpParam
			}
		}
		for _, cl := range []string{"cpu", "p3.16xlarge"} {
			for _, shape := range shapes {
				c, lm := benchMesh(t, cl, shape[0], shape[1])
				for _, weighed := range []bool{false, true} {
					for _, once := range []bool{true, false} {
						opts := Options{Cluster: c}
						if weighed {
							opts.SolveLayersOnce, opts.Microbatches, opts.Update, opts.Accumulated = true, 4, update, acc
						}
						if once {
							opts.sharedCells = math.MaxInt32
						}
						p, err := newPlanner(g, lm, opts)
						require.NoError(t, err)
						at := fmt.Sprintf("%s on %s %v, weighed %v, once per layout %v", name, cl, shape, weighed, once)
						if once {
							require.Zero(t, p.perEdge, at)
						}
						for range plans {
							obj, price := objectiveAndPrice(t, p, randomChoice(p, rng), at)
							compared++
							if once {
								require.InDelta(t, price, obj, 1e-9*price, "%s: the objective is the plan's price", at)
								continue
							}
							require.GreaterOrEqual(t, obj, price*(1-1e-9), "%s: per-consumer and per-edge pricing only add", at)
							if obj > price*(1+1e-9) {
								above++
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d plans compared; %d priced above under Solve's per-consumer pricing", compared, above)
	assert.Positive(t, above, "per-consumer pricing shows (the check can fail)")
}

// TestObjectiveInsideGroups: the smallest graphs that showed the objective away from the
// price, 2,000 random plans of each. m = x·w leads a group with its followers (no fusion: cpu).
//
//   - "other member": s = add(m, transpose(m)) reads the transpose, a member of its group
//     but not its leader, in s's layout: the ILP priced nothing for it, Result did.
//   - "made inside, read outside": t = transpose(m) and the matmul y = m·v read m; where
//     t's strategy reads m resharded into the layout y also wants, Result makes that
//     layout once, the ILP priced it in the group and on y's edge.
func TestObjectiveInsideGroups(t *testing.T) {
	type build func(b *gb) ir.ValueID
	for _, tc := range []struct {
		name string
		out  build
	}{
		{"other member", func(b *gb) ir.ValueID {
			m := b.op(ir.OpMatMul, "m", nil, b.input("x", 8, 8), b.param("w", 8, 8))
			return b.op(ir.OpAdd, "s", nil, m, b.transpose("t", m))
		}},
		{"made inside, read outside", func(b *gb) ir.ValueID {
			m := b.op(ir.OpMatMul, "m", nil, b.input("x", 8, 8), b.param("w", 8, 8))
			r := b.op(ir.OpLayerNorm, "n", nil, m, b.param("gamma", 8), b.param("beta", 8))
			y := b.op(ir.OpMatMul, "y", nil, m, b.param("v", 8, 8))
			b.g.AddOutput(r, ir.Pos{})
			return y
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newGB(t, "inside")
			b.g.AddOutput(tc.out(b), ir.Pos{})
			require.NoError(t, ir.Verify(b.g))
			for _, cl := range []string{"cpu", "p3.16xlarge"} {
				c, lm := benchMesh(t, cl, 2, 2)
				p, err := newPlanner(b.g, lm, Options{Cluster: c, NoPrune: true, sharedCells: math.MaxInt32})
				require.NoError(t, err)
				n, off := 0, 0
				rng := rand.New(rand.NewSource(1))
				for range 2000 {
					obj, price := objectiveAndPrice(t, p, randomChoice(p, rng), tc.name)
					n++
					if math.Abs(obj-price) > 1e-9*price {
						off++
					}
				}
				t.Logf("%s on %s: %d plans, %d with the objective off the price", tc.name, cl, n, off)
				assert.Zero(t, off, "%s on %s", tc.name, cl)
			}
		})
	}
}
