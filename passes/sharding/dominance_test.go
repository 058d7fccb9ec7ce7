package sharding

import (
	"context"
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// full is opts without dominance pruning and without folding constants: the ILP as it
// was before them.
func full(opts Options) Options {
	opts.NoPrune, opts.noFill = true, true
	return opts
}

// TestPrunedILPMatchesBruteForce: on random graphs (some with constants read by one op) on
// 1×2 and 2×2 meshes, without merging and with it, the pruned ILP's optimum equals the
// cheapest of all strategy combinations (brute force over every candidate, without
// merging) and the optimum of the ILP without pruning or folding, with no memory budget
// and with a budget between the smallest and largest peak; pruning does drop strategies,
// and edge classes of equal costs are merged (mergeEqual) in some pairs.
func TestPrunedILPMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(13))
	done, pruned, folded, budgeted, merged := 0, 0, 0, 0, 0
	for trial := 0; done < 40 && trial < 600; trial++ {
		m := []*mesh.LogicalMesh{uniform(t, 1, 2), uniform(t, 2, 2)}[trial%2]
		lm := m.WithAxisCost(0, 2, 0.5)
		g := randomGraphConst(t, rng, 4+rng.Intn(5), true)
		merge := trial%3 != 0
		opts := Options{DeviceFLOPS: 0.5, NoMerge: !merge}
		name := fmt.Sprintf("trial %d (merge %v) on %s: %s", trial, merge, lm, g)
		ref, err := newPlanner(g, lm, full(opts))
		require.NoError(t, err)
		combos := 1
		for _, gr := range ref.groups {
			combos *= len(gr.strats)
		}
		if combos > 8000 {
			continue
		}
		want, err := ref.solve(context.Background())
		require.NoError(t, err, name)
		if !merge {
			best := bruteBest(g, lm, ref.cands)
			require.InDelta(t, best, want.Cost.Total, 1e-6*max(1, best), name)
		}
		p, err := newPlanner(g, lm, opts)
		require.NoError(t, err)
		got, err := p.solve(context.Background())
		require.NoError(t, err, name)
		assert.InDelta(t, want.Cost.Total, got.Cost.Total, 1e-9*max(1, want.Cost.Total), name)
		assert.InDelta(t, want.ILP.Objective, got.ILP.Objective, 1e-9*max(1, want.ILP.Objective), name)
		assert.LessOrEqual(t, got.ILP.Variables, want.ILP.Variables, name)
		pruned += got.ILP.Pruned
		merged += p.merged + ref.merged
		if len(p.groups) < len(ref.groups) {
			folded++
		}
		// A budget between the least and the most memory any plan needs.
		lo, hi := ref.boundPeak()
		_, l := argmax(lo)
		_, h := argmax(hi)
		if h > l {
			opts.MemoryBudget = int64(l + (h-l)/3)
			want, errW := solveWith(g, lm, full(opts))
			got, errG := solveWith(g, lm, opts)
			require.Equal(t, errW == nil, errG == nil, "%s: %v vs %v", name, errW, errG)
			if errW == nil {
				budgeted++
				assert.InDelta(t, want.Cost.Total, got.Cost.Total, 1e-9*max(1, want.Cost.Total), "%s budget %d", name, opts.MemoryBudget)
				assert.LessOrEqual(t, got.PeakMemory, opts.MemoryBudget)
			} else {
				var mw, mg *MemoryError
				require.ErrorAs(t, errW, &mw)
				require.ErrorAs(t, errG, &mg)
				assert.Equal(t, mw.Minimum, mg.Minimum, name)
			}
		}
		done++
	}
	assert.Equal(t, 40, done, "too few random graphs small enough to enumerate")
	assert.Positive(t, pruned, "no strategy was ever dominated")
	assert.Positive(t, folded, "no constant was ever folded")
	assert.Positive(t, merged, "no edge classes of equal costs were ever merged")
	t.Logf("%d strategies pruned, %d edge cells merged", pruned, merged)
	assert.Positive(t, budgeted, "no budget left a plan")
}

func solveWith(g *ir.Graph, lm *mesh.LogicalMesh, opts Options) (*Result, error) {
	p, err := newPlanner(g, lm, opts)
	if err != nil {
		return nil, err
	}
	return p.solve(context.Background())
}

// TestPruneKeepsOptimum: on the zoo's tiny models (their SGD step: mlp-tiny on a 2×2 mesh
// of dgx-a100, gpt-tiny on 2×1, its 2×2 ILP taking 15 s), pruning and folding keep the
// optimum of the full ILP while the ILP shrinks; mlp-tiny also under a binding budget
// (gpt-tiny's budgeted ILPs take half a minute: the random graphs above cover budgets).
func TestPruneKeepsOptimum(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n0, n1 int
	}{{"mlp-tiny", 2, 2}, {"gpt-tiny", 2, 1}} {
		name := tc.name
		c, lm := benchMesh(t, "dgx-a100", tc.n0, tc.n1)
		g, err := frontend.ParseFile("../../testdata/models/" + name + ".ir")
		require.NoError(t, err)
		g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01})
		require.NoError(t, err)
		opts := Options{Cluster: c}
		want, err := Solve(context.Background(), g, lm, full(opts))
		require.NoError(t, err)
		got, err := Solve(context.Background(), g, lm, opts)
		require.NoError(t, err)
		assert.InDelta(t, want.Cost.Total, got.Cost.Total, 1e-9*want.Cost.Total, name)
		assert.Less(t, got.ILP.Variables, want.ILP.Variables, name)
		assert.Positive(t, got.ILP.Pruned, name)
		if name != "mlp-tiny" {
			continue
		}
		// A budget just under the unbudgeted plan's peak binds.
		opts.MemoryBudget = want.PeakMemory * 9 / 10
		want, errW := Solve(context.Background(), g, lm, full(opts))
		got, errG := Solve(context.Background(), g, lm, opts)
		require.Equal(t, errW == nil, errG == nil, "%s: %v vs %v", name, errW, errG)
		if errW == nil {
			assert.InDelta(t, want.Cost.Total, got.Cost.Total, 1e-9*want.Cost.Total, name)
		}
	}
}
