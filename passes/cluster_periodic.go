package passes

import (
	"math"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// Periodic layers. The search prices each distinct layer once per logical mesh (the oracle
// keys solves by a layer's structure), so what a compile costs grows with the number of
// distinct layers, not with L. Alpa's DP balances FLOPs and lets each cut fall anywhere;
// in a model whose repeated unit is not one block — the MoE transformer alternates a dense
// and an expert block, so its unit is a pair — and whose ends (embedding, head) are not a
// whole number of units, the balanced cuts drift from one offset of the unit to another,
// and a 16-block MoE in 8 layers gets 7 distinct layers where 3 would do (first, middle,
// last). periodicForward looks for a clustering whose inner cuts all fall at the same
// phase — the same offset into the same kind of block — so that the layers between two
// such cuts hold the same sequence of blocks and are identical.

// blockPhases gives each forward op (by position in fwd) its phase: the kind of its
// block (blocks of the same forward op sequence, wired the same way inside, are of one
// kind) and its offset among the block's forward ops, as one number; -1 for an op in no
// block.
func blockPhases(g *ir.Graph, fwd []ir.ValueID) []int {
	phase, _ := blockKinds(g, fwd)
	return phase
}

// blockKinds is blockPhases and the number of block kinds.
func blockKinds(g *ir.Graph, fwd []ir.ValueID) ([]int, int) {
	type blockOps struct {
		ops []int // positions in fwd
	}
	blocks := map[ir.Block]*blockOps{}
	var order []ir.Block
	for p, id := range fwd {
		b := g.Values[id].Block
		if b == ir.NoBlock {
			continue
		}
		if blocks[b] == nil {
			blocks[b] = &blockOps{}
			order = append(order, b)
		}
		blocks[b].ops = append(blocks[b].ops, p)
	}
	phase := make([]int, len(fwd))
	for i := range phase {
		phase[i] = -1
	}
	kinds := map[string]int{}
	at := map[ir.ValueID]int{} // offset of a forward op within its block
	longest := 0
	for _, b := range order {
		longest = max(longest, len(blocks[b].ops))
	}
	var sb strings.Builder
	for _, b := range order {
		ops := blocks[b].ops
		clear(at)
		sb.Reset()
		for j, p := range ops {
			id := fwd[p]
			at[id] = j
			v := &g.Values[id]
			sb.WriteString(v.Op.String())
			for _, a := range v.Args {
				if k, ok := at[a]; ok && g.Values[a].Block == b {
					sb.WriteString(" %" + strconv.Itoa(j-k))
				} else {
					sb.WriteString(" ext")
				}
			}
			for _, a := range v.Attrs {
				sb.WriteString(" " + a.Name + "=" + ir.FormatAttrValue(a.Value))
			}
			sb.WriteString(" : " + v.Type.String() + "\n")
		}
		k, ok := kinds[sb.String()]
		if !ok {
			k = len(kinds)
			kinds[sb.String()] = k
		}
		for j, p := range ops {
			phase[p] = k*longest + j
		}
	}
	return phase, len(kinds)
}

// layerShapes counts the distinct layers of cut by the phases of their forward ops (an op
// in no block by its op), a proxy for the distinct structures the search will price.
func layerShapes(g *ir.Graph, fwd []ir.ValueID, phase []int, cut []int) int {
	seen := map[string]bool{}
	var sb strings.Builder
	for k := 0; k+1 < len(cut); k++ {
		sb.Reset()
		for p := cut[k]; p < cut[k+1]; p++ {
			if phase[p] >= 0 {
				sb.WriteString(strconv.Itoa(phase[p]))
			} else {
				sb.WriteString(g.Values[fwd[p]].Op.String() + g.Values[fwd[p]].Type.String())
			}
			sb.WriteByte(' ')
		}
		seen[sb.String()] = true
	}
	return len(seen)
}

// periodicImbalance caps the imbalance of a periodic clustering when the user set none:
// its heaviest layer holds at most 1.5 times the mean forward FLOPs, the tolerance Alpa's
// own layer construction admits by default (DEFAULT_EPS = 0.5 in
// alpa/pipeline_parallel/layer_construction.py).
const periodicImbalance = 0.5

// periodicForward returns a clustering of fwd into L layers whose inner cuts all fall at
// one phase, and its δ, when the model marks blocks of two kinds or more (its repeated
// unit is longer than one block: the MoE's dense and expert pair) and the periodic
// clustering has fewer distinct layers than plain (Alpa's balanced cuts); ok false
// otherwise. It is clusterForward's DP with the inner cuts restricted to
// one phase: the FLOPs limit is 1.1 times (clusterForward's first δ) the lightest
// heaviest layer any phase can reach (bottleneck), capped at 1+imbalance times the mean
// (periodicImbalance when the user set no δ), and of the phases that meet it the one with
// the least bytes crossing wins, then the lighter heaviest layer, then the first in fwd's
// order. Minimising the heaviest layer alone picked cuts through attention scores
// (moe-10b at 32 micro-batches: 6.1 GB crossing the cuts, against 0.7 GB by this rule).
func periodicForward(g *ir.Graph, fwd []ir.ValueID, L int, plain []int, imbalance float64) (cut []int, d float64, ok bool) {
	if L < 3 {
		return nil, 0, false // a first and a last layer only: nothing repeats
	}
	if imbalance == 0 {
		imbalance = periodicImbalance
	}
	phase, kinds := blockKinds(g, fwd)
	if kinds < 2 {
		// One kind of block (GPT): the balanced cuts drift less (GPT-39B ties 6 of its 8
		// layers already) and a periodic clustering measured a slower plan (gpt-2.6b on 8
		// V100s, 44.63 s a step against 42.35 s): left to Alpa's cuts.
		return nil, 0, false
	}
	var phases []int
	at := map[int][]int{} // the cut positions of each phase
	for p := 1; p < len(fwd); p++ {
		if ph := phase[p]; ph >= 0 {
			if at[ph] == nil {
				phases = append(phases, ph)
			}
			at[ph] = append(at[ph], p)
		}
	}
	if len(phases) == 0 {
		return nil, 0, false // no marked blocks
	}
	flops := make([]float64, len(fwd)+1)
	for i, id := range fwd {
		flops[i+1] = flops[i] + g.FLOPs(id)
	}
	mean := flops[len(fwd)] / float64(L)
	heaviest := map[int]float64{}
	for _, ph := range phases {
		if len(at[ph]) >= L-1 {
			heaviest[ph] = bottleneck(L, flops, at[ph])
		}
	}
	shapes := layerShapes(g, fwd, phase, plain)
	least := math.Inf(1)
	for _, h := range heaviest {
		least = min(least, h)
	}
	limit := min(least*(1+0.1), (1+imbalance)*mean)
	if least > limit*(1+1e-12) {
		return nil, 0, false
	}
	bestCost, bestMax := math.Inf(1), math.Inf(1)
	for _, ph := range phases {
		h, feasible := heaviest[ph]
		if !feasible || h > limit*(1+1e-12) {
			continue
		}
		c, cost, found := restrictedDP(g, fwd, L, flops, limit, at[ph])
		if !found || layerShapes(g, fwd, phase, c) >= shapes {
			continue
		}
		if cost < bestCost || (cost == bestCost && h < bestMax) {
			cut, bestCost, bestMax, ok = c, cost, h, true
		}
	}
	return cut, limit/mean - 1, ok
}

// bottleneck is the least, over clusterings of the forward ops into L layers with inner
// cuts from at, of the heaviest layer's FLOPs.
func bottleneck(L int, flops []float64, at []int) float64 {
	n := len(flops) - 1
	pts := append(append([]int{0}, at...), n)
	B := make([][]float64, L+1)
	for k := range B {
		B[k] = make([]float64, len(pts))
		for j := range B[k] {
			B[k][j] = math.Inf(1)
		}
	}
	B[0][0] = 0
	for k := 1; k <= L; k++ {
		for j := 1; j < len(pts); j++ {
			for i := k - 1; i < j; i++ {
				if v := max(B[k-1][i], flops[pts[j]]-flops[pts[i]]); v < B[k][j] {
					B[k][j] = v
				}
			}
		}
	}
	return B[L][len(pts)-1]
}

// restrictedDP is layerDP with the inner cuts taken from at (ascending positions in fwd):
// the least bytes crossing into L layers of at most limit FLOPs each; found false when no
// such clustering exists.
func restrictedDP(g *ir.Graph, fwd []ir.ValueID, L int, flops []float64, limit float64, at []int) ([]int, float64, bool) {
	n := len(fwd)
	pts := append(append([]int{0}, at...), n) // cut candidates, 0 and n included
	idx := make(map[int]int, len(pts))
	for j, p := range pts {
		idx[p] = j
	}
	inf := math.Inf(1)
	G := make([][]float64, L+1) // G[k][j]: best cost of fwd[:pts[j]] in k layers
	arg := make([][]int, L+1)
	for k := range G {
		G[k], arg[k] = make([]float64, len(pts)), make([]int, len(pts))
		for j := range G[k] {
			G[k][j] = inf
		}
	}
	G[0][0] = 0
	pos := make([]int32, len(g.Values))
	for i, id := range fwd {
		pos[id] = int32(i + 1)
	}
	in := newCrossing(g, pos)
	for jr := 1; jr < len(pts); jr++ {
		r := pts[jr]
		in.reset(r)
		for i := r; i >= 1; i-- { // the last layer is fwd[i-1:r]
			c := in.add(fwd[i-1], i)
			if flops[r]-flops[i-1] > limit*(1+1e-12) {
				break
			}
			ji, ok := idx[i-1]
			if !ok {
				continue
			}
			for k := 1; k <= min(L, jr); k++ {
				if v := G[k-1][ji] + c; v < G[k][jr] {
					G[k][jr], arg[k][jr] = v, ji
				}
			}
		}
	}
	last := len(pts) - 1
	if math.IsInf(G[L][last], 1) {
		return nil, 0, false
	}
	cut := make([]int, L+1)
	j := last
	for k := L; k > 0; k-- {
		cut[k] = pts[j]
		j = arg[k][j]
	}
	return cut, G[L][last], true
}
