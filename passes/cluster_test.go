package passes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
)

// chainGraph builds a random MLP-like forward graph: matmuls of random widths, each
// followed by relu and sometimes a skip connection, ending in a scalar loss.
func chainGraph(t testing.TB, r *rand.Rand, n int) *ir.Graph {
	g := ir.NewGraph("chain")
	must := func(id ir.ValueID, err error) ir.ValueID {
		t.Helper()
		require.NoError(t, err)
		return id
	}
	batch, width := 4, 2+r.IntN(6)
	h := must(g.Declare(ir.OpInput, "x", ir.Type{DType: ir.F32, Shape: ir.Shape{batch, width}}, 0, ir.Pos{}))
	skip := h
	for i := range n {
		next := 2 + r.IntN(12)
		if r.IntN(3) == 0 {
			next = width // keeps the shape, so a skip connection can join
		}
		w := must(g.Declare(ir.OpParam, fmt.Sprintf("w%d", i), ir.Type{DType: ir.F32, Shape: ir.Shape{width, next}}, -1, ir.Pos{}))
		h = must(g.Append(ir.OpMatMul, fmt.Sprintf("h%d", i), []ir.ValueID{h, w}, nil, ir.Pos{}))
		h = must(g.Append(ir.OpRelu, fmt.Sprintf("a%d", i), []ir.ValueID{h}, nil, ir.Pos{}))
		if next == width && g.Values[skip].Type.Shape[1] == next && r.IntN(2) == 0 {
			h = must(g.Append(ir.OpAdd, fmt.Sprintf("s%d", i), []ir.ValueID{h, skip}, nil, ir.Pos{}))
		}
		if r.IntN(2) == 0 {
			skip = h
		}
		width = next
	}
	loss := must(g.Append(ir.OpReduceSum, "loss", []ir.ValueID{h}, ir.Attrs{}.With("axes", []int{0, 1}), ir.Pos{}))
	g.AddOutput(loss, ir.Pos{})
	require.NoError(t, ir.Verify(g))
	return g
}

// bruteCluster tries every way to cut the forward ops into L non-empty contiguous layers
// and returns the least crossing bytes under the FLOPs limit.
func bruteCluster(g *ir.Graph, L int, limit float64) float64 {
	fwd := forwardOps(g)
	best := math.Inf(1)
	var rec func(start, k int, cuts []int)
	rec = func(start, k int, cuts []int) {
		if k == L-1 {
			cuts = append(cuts, len(fwd))
			if c, ok := cutCost(g, fwd, cuts, limit); ok && c < best {
				best = c
			}
			return
		}
		for e := start + 1; e < len(fwd); e++ {
			rec(e, k+1, append(cuts, e))
		}
	}
	rec(0, 0, []int{0})
	return best
}

func cutCost(g *ir.Graph, fwd []ir.ValueID, cuts []int, limit float64) (float64, bool) {
	layer := map[ir.ValueID]int{}
	for k := 0; k+1 < len(cuts); k++ {
		flops := 0.0
		for _, id := range fwd[cuts[k]:cuts[k+1]] {
			layer[id] = k
			flops += g.FLOPs(id)
		}
		if flops > limit*(1+1e-12) {
			return 0, false
		}
	}
	cost := 0.0
	counted := map[[2]int]bool{}
	for _, id := range fwd {
		for _, a := range g.Values[id].Args {
			la, isFwd := layer[a]
			key := [2]int{int(a), layer[id]}
			if isFwd && la < layer[id] && !counted[key] {
				counted[key] = true
				cost += float64(g.Values[a].Type.Bytes())
			}
		}
	}
	return cost, true
}

func TestClusterLayersMatchesBruteForce(t *testing.T) {
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		g := chainGraph(t, r, 2+r.IntN(4))
		L := 1 + r.IntN(4)
		delta := []float64{0.2, 0.5, 1, 3}[r.IntN(4)]
		lay, err := ClusterLayers(g, ClusterOptions{Layers: L, Imbalance: delta})
		require.NoError(t, err)
		L = lay.L
		limit := (1 + lay.Imbalance) * g.TotalFLOPs() / float64(L)
		want := bruteCluster(g, L, limit)
		got := 0.0
		for _, b := range lay.InBytes {
			got += float64(b)
		}
		require.Equal(t, want, got, "seed %d, L %d, δ %g", seed, L, lay.Imbalance)
	}
}

func TestClusterLayersPlacesEveryValue(t *testing.T) {
	g := chainGraph(t, rand.New(rand.NewPCG(3, 3)), 6)
	lay, err := ClusterLayers(g, ClusterOptions{Layers: 3})
	require.NoError(t, err)
	prev := 0
	for _, id := range forwardOps(g) {
		l := lay.Of[id]
		assert.GreaterOrEqual(t, l, prev, "forward layers are contiguous")
		prev = l
	}
	for i, l := range lay.Of {
		assert.True(t, l >= 0 && l < lay.L, "value %s has layer %d", g.Values[i].Name, l)
	}
	total := 0.0
	for _, f := range lay.FLOPs {
		assert.Positive(t, f)
		total += f
	}
	assert.InDelta(t, g.TotalFLOPs(), total, 1e-9*total)
	w0, _ := g.Lookup("w0")
	assert.Equal(t, 0, lay.Of[w0], "a param goes with its first user")
}

func TestClusterLayersErrors(t *testing.T) {
	g := ir.NewGraph("empty")
	_, err := ClusterLayers(g, ClusterOptions{})
	require.ErrorContains(t, err, "no output")
	g = chainGraph(t, rand.New(rand.NewPCG(1, 1)), 2)
	_, err = ClusterLayers(g, ClusterOptions{Layers: -1})
	require.ErrorContains(t, err, "must not be negative")
	lay, err := ClusterLayers(g, ClusterOptions{Layers: 50})
	require.NoError(t, err)
	assert.Equal(t, len(forwardOps(g)), lay.L, "no more layers than forward ops")
}

// TestClusterLayersOrdersTheBackward checks what a pipeline needs of the layering of a
// whole training step: no backward or update op reads a backward or update value of an
// earlier layer. gpt-tiny on 8 layers broke it (the sum of a layer norm's fanned-out
// adjoint sat a layer before the adjoint), and 1F1B deadlocked.
func TestClusterLayersOrdersTheBackward(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		step, err := TrainingStep(model(t, name), Optimizer{Kind: "adam", LR: 0.01})
		require.NoError(t, err)
		fwd := map[ir.ValueID]bool{}
		for _, id := range forwardOps(step) {
			fwd[id] = true
		}
		inner := func(id ir.ValueID) bool {
			v := &step.Values[id]
			return !fwd[id] && !v.Op.IsLeaf() && v.Op != ir.OpConstant
		}
		for L := 1; L <= 12; L++ {
			lay, err := ClusterLayers(step, ClusterOptions{Layers: L})
			require.NoError(t, err)
			for i := range step.Values {
				if !inner(ir.ValueID(i)) {
					continue
				}
				for _, a := range step.Values[i].Args {
					if inner(a) {
						require.LessOrEqual(t, lay.Of[i], lay.Of[a], "%s, %d layers: %s reads %s of an earlier layer",
							name, L, step.Values[i].Name, step.Values[a].Name)
					}
				}
			}
		}
	}
}

// TestClusterLayersTiedParamParts: a param read in several layers (a tied embedding: the
// token lookup in the first layer, the output projection in the last) has one adjoint part
// per reader, and each goes where fewer bytes cross between layers each micro-batch: with
// its reader (the part crosses to the param's layer) or with the param (the reader's
// values it reads cross). The tiny GPT and MoE send the part (8 KB against 48 KB of the
// logits' adjoint and the final hidden state); a GPT of a wide hidden and a short batch
// (TestSlowLinksMakePipelines') sends the reader's values (1 MB against 640 KB). Without
// ReaderParts every part stays with its param.
func TestClusterLayersTiedParamParts(t *testing.T) {
	wide := zoo.NewGPT()
	wide.Layers, wide.Hidden, wide.Heads, wide.Seq, wide.Vocab, wide.Batch = 2, 1024, 8, 16, 256, 8
	wideGraph, err := wide.Build()
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		g     *ir.Graph
		moved bool // the output projection's part leaves the param's layer
	}{{"gpt-tiny", model(t, "gpt-tiny"), true}, {"moe-tiny", model(t, "moe-tiny"), true}, {"wide", wideGraph, false}} {
		step, err := TrainingStep(tc.g, Optimizer{Kind: "adam", LR: 0.01})
		require.NoError(t, err)
		for L := 2; L <= 8; L++ {
			lay, err := ClusterLayers(step, ClusterOptions{Layers: L, ReaderParts: true})
			require.NoError(t, err)
			parts, moved := 0, 0
			for i := range step.Values {
				p := step.Values[i].Prov
				x, ok := p.OfValue()
				if p.Role != ir.RoleAdjointPart || !ok || step.Values[x].Op != ir.OpParam {
					continue
				}
				parts++
				reader := readerLayer(step, ir.ValueID(i), x, lay.Of)
				require.GreaterOrEqual(t, reader, 0, "%s, %d layers: %s names no reader of %s", tc.name, L, step.Values[i].Name, step.Values[x].Name)
				// The bytes crossing each micro-batch with the part at its reader and at x.
				atReader, atParam := int64(0), int64(0)
				if reader != lay.Of[x] {
					atReader = step.Values[i].Type.Bytes()
				}
				for _, a := range step.Values[i].Args {
					if v := &step.Values[a]; !v.Op.IsLeaf() && v.Op != ir.OpConstant && lay.Of[a] != lay.Of[x] {
						atParam += v.Type.Bytes()
					}
				}
				want := lay.Of[x]
				if atReader < atParam {
					want, moved = reader, moved+1
				}
				assert.Equal(t, want, lay.Of[i], "%s, %d layers: %s (%d B at its reader's layer, %d B with %s)",
					tc.name, L, step.Values[i].Name, atReader, atParam, step.Values[x].Name)
			}
			require.Positive(t, parts, "%s: no tied param", tc.name)
			assert.Equal(t, tc.moved, moved > 0, "%s, %d layers: %d parts moved", tc.name, L, moved)
			// Without ReaderParts (one host) every part stays with its param.
			lay, err = ClusterLayers(step, ClusterOptions{Layers: L})
			require.NoError(t, err)
			for i := range step.Values {
				p := step.Values[i].Prov
				if x, ok := p.OfValue(); ok && p.Role == ir.RoleAdjointPart && step.Values[x].Op == ir.OpParam {
					assert.Equal(t, lay.Of[x], lay.Of[i], "%s, %d layers, no ReaderParts: %s", tc.name, L, step.Values[i].Name)
				}
			}
		}
	}
}

// TestClusterLayerings checks the two layerings over one forward clustering: base is
// ClusterLayers without ReaderParts, moved is ClusterLayers with it, or nil where the two
// are equal (the wide GPT, whose part stays with its param).
func TestClusterLayerings(t *testing.T) {
	wide := zoo.NewGPT()
	wide.Layers, wide.Hidden, wide.Heads, wide.Seq, wide.Vocab, wide.Batch = 2, 1024, 8, 16, 256, 8
	wideGraph, err := wide.Build()
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		g    *ir.Graph
	}{{"gpt-tiny", model(t, "gpt-tiny")}, {"moe-tiny", model(t, "moe-tiny")}, {"wide", wideGraph}, {"mlp-tiny", model(t, "mlp-tiny")}} {
		step, err := TrainingStep(tc.g, Optimizer{Kind: "adam", LR: 0.01})
		require.NoError(t, err)
		for L := 1; L <= 8; L++ {
			base, moved, err := ClusterLayerings(step, ClusterOptions{Layers: L, ReaderParts: true})
			require.NoError(t, err)
			plain, err := ClusterLayers(step, ClusterOptions{Layers: L})
			require.NoError(t, err)
			reader, err := ClusterLayers(step, ClusterOptions{Layers: L, ReaderParts: true})
			require.NoError(t, err)
			assert.Equal(t, plain, base, "%s, %d layers: base", tc.name, L)
			if slices.Equal(plain.Of, reader.Of) {
				assert.Nil(t, moved, "%s, %d layers: no part moves", tc.name, L)
			} else {
				assert.Equal(t, reader, moved, "%s, %d layers: moved", tc.name, L)
			}
		}
	}
}
