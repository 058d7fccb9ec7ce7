package passes

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
)

// TestRestrictedDPMatchesBruteForce checks the two DPs of the periodic clustering against
// every choice of L−1 inner cuts from the allowed positions: bottleneck is the least
// heaviest layer, restrictedDP the least bytes crossing under a FLOPs limit (and a
// clustering exists exactly when one of the choices meets the limit).
func TestRestrictedDPMatchesBruteForce(t *testing.T) {
	checked := 0
	for seed := range uint64(80) {
		r := rand.New(rand.NewPCG(seed, 11))
		g := chainGraph(t, r, 3+r.IntN(5))
		fwd := forwardOps(g)
		n := len(fwd)
		flops := make([]float64, n+1)
		for i, id := range fwd {
			flops[i+1] = flops[i] + g.FLOPs(id)
		}
		var at []int
		for p := 1; p < n; p++ {
			if r.IntN(3) > 0 {
				at = append(at, p)
			}
		}
		L := 2 + r.IntN(3)
		// Every choice of L−1 cuts from at.
		var combos [][]int
		var rec func(from int, cuts []int)
		rec = func(from int, cuts []int) {
			if len(cuts) == L {
				combos = append(combos, append(slices.Clone(cuts), n))
				return
			}
			for j := from; j < len(at); j++ {
				rec(j+1, append(cuts, at[j]))
			}
		}
		rec(0, []int{0})
		heaviest := func(cuts []int) float64 {
			h := 0.0
			for k := 0; k+1 < len(cuts); k++ {
				h = max(h, flops[cuts[k+1]]-flops[cuts[k]])
			}
			return h
		}
		least := math.Inf(1)
		for _, c := range combos {
			least = min(least, heaviest(c))
		}
		require.Equal(t, least, bottleneck(L, flops, at), "seed %d: bottleneck", seed)
		if math.IsInf(least, 1) {
			_, _, found := restrictedDP(g, fwd, L, flops, math.Inf(1), at)
			require.False(t, found, "seed %d: too few cut positions", seed)
			continue
		}
		limit := least * (1 + r.Float64())
		if r.IntN(4) == 0 {
			limit = least * 0.99 // nothing meets it
		}
		want := math.Inf(1)
		for _, c := range combos {
			if cost, ok := cutCost(g, fwd, c, limit); ok {
				want = min(want, cost)
			}
		}
		cut, cost, found := restrictedDP(g, fwd, L, flops, limit, at)
		require.Equal(t, !math.IsInf(want, 1), found, "seed %d: found", seed)
		if !found {
			continue
		}
		require.Equal(t, want, cost, "seed %d: least crossing", seed)
		got, ok := cutCost(g, fwd, cut, limit)
		require.True(t, ok, "seed %d: the cut meets the limit", seed)
		require.Equal(t, cost, got, "seed %d: the cut has the cost", seed)
		for _, p := range cut[1:L] {
			require.Contains(t, at, p, "seed %d: inner cuts come from at", seed)
		}
		checked++
	}
	require.Greater(t, checked, 30)
}

// TestPeriodicLayersRepeat clusters a 16-layer MoE (dense and expert blocks alternate,
// the head weighs about half a pair) into 8 layers: Alpa's balanced cuts drift from one
// offset of the (dense, expert) pair to another, the periodic ones put every inner cut at
// one offset, so that the six inner layers run the same forward ops, at fewer bytes
// crossing and with the heaviest layer within the cap.
func TestPeriodicLayersRepeat(t *testing.T) {
	m := zoo.NewMoE()
	m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch, m.Experts, m.Group = 16, 64, 4, 32, 2048, 8, 8, 64
	g, err := m.Build()
	require.NoError(t, err)
	step, err := TrainingStep(g, Optimizer{Kind: "adam", LR: 0.01})
	require.NoError(t, err)
	const L = 8
	lay, err := ClusterLayers(step, ClusterOptions{Layers: L})
	require.NoError(t, err)

	fwd := forwardOps(step)
	phase := blockPhases(step, fwd)
	plain, _ := clusterForward(step, fwd, L, 0)
	var cut []int
	for p, id := range fwd {
		if p == 0 || lay.Of[id] != lay.Of[fwd[p-1]] {
			cut = append(cut, p)
		}
	}
	cut = append(cut, len(fwd))
	require.Len(t, cut, L+1)
	assert.Greater(t, layerShapes(step, fwd, phase, plain), 4, "the balanced cuts drift")
	assert.LessOrEqual(t, layerShapes(step, fwd, phase, cut), 3, "first, middle, last")
	ops := func(k int) []string {
		var s []string
		for _, id := range fwd[cut[k]:cut[k+1]] {
			v := &step.Values[id]
			s = append(s, v.Op.String()+v.Type.String())
		}
		return s
	}
	for k := 2; k < L-1; k++ {
		assert.Equal(t, ops(1), ops(k), "layer %d runs layer 1's forward ops", k)
	}
	in := func(cuts []int) float64 {
		c, ok := cutCost(step, fwd, cuts, math.Inf(1))
		require.True(t, ok)
		return c
	}
	assert.Less(t, in(cut), in(plain), "fewer bytes cross")
	total, heaviest := 0.0, 0.0
	for k := range L {
		f := 0.0
		for _, id := range fwd[cut[k]:cut[k+1]] {
			f += step.FLOPs(id)
		}
		total += f
		heaviest = max(heaviest, f)
	}
	assert.LessOrEqual(t, heaviest, (1+periodicImbalance)*total/L*(1+1e-9))
	assert.LessOrEqual(t, heaviest/(total/L)-1, lay.Imbalance*(1+1e-9), "Imbalance bounds the heaviest layer")
	t.Logf("shapes %d -> %d, crossing %.0f -> %.0f bytes, heaviest %.3f of the mean, δ %.3f",
		layerShapes(step, fwd, phase, plain), layerShapes(step, fwd, phase, cut), in(plain), in(cut), heaviest/(total/L), lay.Imbalance)
}

// TestPeriodicLayersNeedMarks: a graph without block marks, or with one kind of block
// (GPT), keeps Alpa's cuts.
func TestPeriodicLayersNeedMarks(t *testing.T) {
	m := zoo.NewGPT()
	m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = 16, 64, 4, 32, 2048, 8
	gpt, err := m.Build()
	require.NoError(t, err)
	step, err := TrainingStep(gpt, Optimizer{Kind: "adam", LR: 0.01})
	require.NoError(t, err)
	fwd := forwardOps(step)
	plain, _ := clusterForward(step, fwd, 8, 0)
	_, kinds := blockKinds(step, fwd)
	assert.Equal(t, 1, kinds)
	_, _, ok := periodicForward(step, fwd, 8, plain, 0)
	assert.False(t, ok, "one kind of block")

	g := chainGraph(t, rand.New(rand.NewPCG(5, 5)), 8)
	fwd = forwardOps(g)
	plain, _ = clusterForward(g, fwd, 4, 0)
	_, _, ok = periodicForward(g, fwd, 4, plain, 0)
	assert.False(t, ok)
	for _, b := range g.Values {
		require.Equal(t, ir.NoBlock, b.Block)
	}
}
