package sharding

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/passes"
)

// nameLayer is how tying found layers before graphs carried ir.Block marks: a value was in
// layer N when a component of its name was l<N> ("l3.fc1", "grad.l3.fc1"), and its key was
// its name with that component replaced ("l*.fc1"). The tests below hold the block marks
// to what it gave on the zoo's models, where the names follow that convention.
var nameLayer = regexp.MustCompile(`(?:^|\.)l(\d+)\.`)

// nameBlocks returns the blocks and keys the name convention gives: layer N is block N+1.
func nameBlocks(g *ir.Graph) ([]ir.Block, []string) {
	block, key := make([]ir.Block, len(g.Values)), make([]string, len(g.Values))
	for id, v := range g.Values {
		if m := nameLayer.FindStringSubmatchIndex(v.Name); m != nil {
			n, _ := strconv.Atoi(v.Name[m[2]:m[3]])
			block[id] = ir.Block(n + 1)
			key[id] = v.Name[:m[2]] + "*" + v.Name[m[3]:]
		}
	}
	return block, key
}

// stageGraphs returns the training step of model m (micro-batched, in precision prec, with
// optimizer kind) and the stage graphs the oracle prices: every range of the step's
// clustering into L layers, cut out by passes.Subgraph.
func stageGraphs(t testing.TB, fwd *ir.Graph, micro int, opt passes.Optimizer, L int) []*ir.Graph {
	g, err := passes.Rebatch(fwd, micro)
	require.NoError(t, err)
	g, err = passes.ApplyPrecision(g, opt)
	require.NoError(t, err)
	step, err := passes.TrainingStep(g, opt)
	require.NoError(t, err)
	lay, err := passes.ClusterLayers(step, passes.ClusterOptions{Layers: L})
	require.NoError(t, err)
	out := []*ir.Graph{step}
	for s := 0; s < lay.L; s++ {
		for e := s + 1; e <= lay.L; e++ {
			var ids []ir.ValueID
			for i, l := range lay.Of {
				if l >= s && l < e && !step.Values[i].Op.IsLeaf() {
					ids = append(ids, ir.ValueID(i))
				}
			}
			sub, err := passes.Subgraph(step, fmt.Sprintf("layers%d-%d", s, e-1), ids)
			require.NoError(t, err)
			out = append(out, sub)
		}
	}
	return out
}

// TestBlocksTieAsNamesDid: on the zoo's models — their training steps under SGD and Adam,
// f32 and mixed precision, and every stage graph the oracle cuts out of them — the block
// marks place every value in the block its name did, and each value finds the counterpart
// by its block key (BlockKeys of the whole step) that it found by its name. The one
// exception is MoE, whose dense and MoE layers differ: its names also tied a few adjoints
// of a dense layer to those of an MoE layer (both named d.l<N>.res1, d.l<N>.res2), which
// block keys, ranking values within blocks of different content, leave untied.
func TestBlocksTieAsNamesDid(t *testing.T) {
	gpt, moe, mlp := zoo.NewGPT(), zoo.NewMoE(), zoo.NewMLP()
	gpt.Layers, moe.Layers, mlp.Layers = 4, 4, 4
	for _, c := range []struct {
		name  string
		m     zoo.Model
		micro int
		opt   passes.Optimizer
		L     int
	}{
		{"gpt sgd", gpt, 4, passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}, 4},
		{"gpt adam mixed", gpt, 2, passes.Optimizer{Kind: "adam", LR: 0.01, Precision: "mixed"}, 5},
		{"moe adam", moe, 4, passes.Optimizer{Kind: "adam", LR: 0.01}, 4},
		{"moe sgd mixed-f16", moe, 8, passes.Optimizer{Kind: "sgd", LR: 0.1, Precision: "mixed-f16", LossScale: 128}, 3},
		{"mlp sgd", mlp, 8, passes.Optimizer{Kind: "sgd", LR: 0.1}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			fwd, err := c.m.Build()
			require.NoError(t, err)
			graphs := stageGraphs(t, fwd, c.micro, c.opt, c.L)
			step := graphs[0]
			stepKeys := BlockKeys(step)
			ties, crossed := 0, 0
			for _, g := range graphs {
				nb, nk := nameBlocks(g)
				block, _ := g.Blocks()
				require.Equal(t, nb, block, "%s: the blocks the names say", g.Name)
				keys := make([]uint64, len(g.Values))
				for i := range g.Values {
					id, ok := step.Lookup(g.Values[i].Name)
					require.True(t, ok)
					keys[i] = stepKeys[id]
				}
				want := counterparts(g, nb, nameKeys(nk))
				got := counterparts(g, block, keys)
				for id := range g.Values {
					if want[id] != ir.NoValue {
						ties++
					}
					if want[id] == got[id] {
						continue
					}
					// A name tie across an MoE layer (odd l<N>, even block) and a dense one.
					w := want[id]
					if c.m != moe || w == ir.NoValue || block[w]%2 == block[id]%2 {
						t.Errorf("%s: %s matches %s by block key, %s by name", g.Name, g.Values[id].Name, nameOf(g, got[id]), nameOf(g, w))
					}
					crossed++
				}
			}
			t.Logf("%d ties by name, %d across an MoE and a dense layer not kept", ties, crossed)
			if c.m != moe {
				require.Zero(t, crossed)
			}
		})
	}
}

// nameKeys turns the name convention's keys into counterparts' numeric ones.
func nameKeys(names []string) []uint64 {
	ids := map[string]uint64{"": 0}
	out := make([]uint64, len(names))
	for i, n := range names {
		if _, ok := ids[n]; !ok {
			ids[n] = uint64(len(ids))
		}
		out[i] = ids[n]
	}
	return out
}

func nameOf(g *ir.Graph, id ir.ValueID) string {
	if id == ir.NoValue {
		return "nothing"
	}
	return g.Values[id].Name
}

// renamed returns a copy of g whose values are named v000000x, v000001x, ... by ValueID:
// names that say nothing of a value's block, so that tying that read names would tie
// nothing on it.
func renamed(g *ir.Graph) *ir.Graph {
	c := g.Clone()
	for i := range c.Values {
		c.Values[i].Name = fmt.Sprintf("v%06dx", i)
	}
	return c.Clone() // rebuilds the name index
}

// TestNoBlockFromNames solves a GPT step, and a stage cut out of it, with and without its
// value names: the block marks, the keys, the ties and the plans are the same. Tying by the
// l<N> name convention tied nothing on the renamed graphs.
func TestNoBlockFromNames(t *testing.T) {
	step := gptStep(t, 3, 32, 4, 8, 64, 4)
	lay, err := passes.ClusterLayers(step, passes.ClusterOptions{Layers: 4})
	require.NoError(t, err)
	var ids []ir.ValueID
	for i, l := range lay.Of {
		if l >= 1 && l <= 2 && !step.Values[i].Op.IsLeaf() {
			ids = append(ids, ir.ValueID(i))
		}
	}
	stage, err := passes.Subgraph(step, "layers1-2", ids)
	require.NoError(t, err)
	stepKeys := BlockKeys(step)
	stageKeys := make([]uint64, len(stage.Values))
	for i := range stage.Values {
		id, _ := step.Lookup(stage.Values[i].Name)
		stageKeys[i] = stepKeys[id]
	}
	lm := uniform(t, 1, 2)
	for _, c := range []struct {
		name string
		g    *ir.Graph
		keys []uint64
	}{{"step", step, nil}, {"stage", stage, stageKeys}} {
		anon := renamed(c.g)
		require.NoError(t, ir.Verify(anon))
		nb, _ := nameBlocks(anon)
		require.Equal(t, make([]ir.Block, len(anon.Values)), nb, "the renamed graph has no l<N> names")
		opts := Options{AlpaCompute: true, SolveLayersOnce: true, BlockKeys: c.keys}
		named, err := Solve(context.Background(), c.g, lm, opts)
		require.NoError(t, err)
		blind, err := Solve(context.Background(), anon, lm, opts)
		require.NoError(t, err)
		assert.Positive(t, named.ILP.TiedGroups, c.name)
		named.ILP.SolveTime, blind.ILP.SolveTime = 0, 0
		assert.Equal(t, named.ILP, blind.ILP, c.name)
		assert.Equal(t, named.Specs, blind.Specs, c.name)
		assert.Equal(t, named.Cost, blind.Cost, c.name)
	}
}
