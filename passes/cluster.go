package passes

import (
	"fmt"
	"math"
	"slices"

	"github.com/autopar/autopar/ir"
)

// ClusterOptions tune ClusterLayers.
type ClusterOptions struct {
	// Layers is the number of layers L; 0 picks min(16, the number of forward contractions).
	Layers int
	// Imbalance is δ: a layer may hold at most (1+δ) times the mean forward FLOPs. 0 starts
	// at 0.1 and doubles δ until a clustering exists (one op heavier than the bound forces it).
	Imbalance float64
	// ReaderParts lets a param's adjoint part go with the layer of the reader that made it
	// where fewer bytes then cross between layers each micro-batch (partLayer); otherwise
	// every part goes with its param. Set it where stages may sit on different hosts, whose
	// links make those bytes dear; on one host's links the bytes cost less than the balance
	// the move upsets (GPT-2.6B/8: 51.738 → 52.915 s with the part moved).
	ReaderParts bool
}

// Layering assigns every value of a training step to one of L layers (Alpa §5.2).
type Layering struct {
	L int
	// Of is the layer of each value, indexed by ir.ValueID.
	Of []int
	// FLOPs is the total work of each layer: its forward, backward and update ops.
	FLOPs []float64
	// InBytes is, per layer, the bytes of forward activations it receives from earlier layers:
	// the quantity the clustering minimises.
	InBytes []int64
	// Imbalance is the δ the clustering was found at.
	Imbalance float64
}

// ClusterLayers groups the forward ops of g (the ancestors of its first output, the loss)
// into L contiguous layers of balanced FLOPs that pass few bytes across their bounds, by
// Alpa's dynamic program:
//
//	G(k, r) = min over i of G(k−1, i−1) + C(i, r),  FLOPs(i..r) ≤ (1+δ)·FLOPs/L
//
// where C(i, r) is the size of the activations that ops i..r read from ops before i. Every
// other value then follows the forward layer it belongs to: a param, input or constant goes
// with its first user, and a backward or update op with the forward op it differentiates,
// but never after a backward or update op it reads (see orderBackward). Empty
// layers are never produced: a graph with fewer forward ops than L gets fewer layers.
func ClusterLayers(g *ir.Graph, opts ClusterOptions) (*Layering, error) {
	if len(g.Outputs) == 0 {
		return nil, fmt.Errorf("cluster: graph %s has no output to take as the loss", g.Name)
	}
	if opts.Layers < 0 || opts.Imbalance < 0 || math.IsNaN(opts.Imbalance) {
		return nil, fmt.Errorf("cluster: layers (%d) and imbalance (%g) must not be negative", opts.Layers, opts.Imbalance)
	}
	fwd := forwardOps(g)
	if len(fwd) == 0 {
		return nil, fmt.Errorf("cluster: the loss of graph %s depends on no op", g.Name)
	}
	L := opts.Layers
	if L == 0 {
		L = defaultLayers(g, fwd)
	}
	L = min(L, len(fwd))
	cut, delta := clusterForward(g, fwd, L, opts.Imbalance)
	if pc, pd, ok := periodicForward(g, fwd, L, cut, opts.Imbalance); ok {
		cut, delta = pc, pd
	}
	return place(g, fwd, cut, delta, opts.ReaderParts), nil
}

// ClusterLayerings clusters g as ClusterLayers does (opts.ReaderParts is ignored) and
// returns both placements of the params' adjoint parts over the one forward clustering:
// base with every part beside its param, moved with a part beside its reader where fewer
// bytes cross (ReaderParts); moved is nil where it would equal base (no part moves). Which
// one a compile keeps is a choice priced by the search (autopar's chooseLayering): the
// part's stage trades a transfer against a stage's balance, which only a plan weighs.
func ClusterLayerings(g *ir.Graph, opts ClusterOptions) (base, moved *Layering, err error) {
	opts.ReaderParts = false
	if base, err = ClusterLayers(g, opts); err != nil {
		return nil, nil, err
	}
	fwd := forwardOps(g)
	cut := base.cut(fwd)
	moved = place(g, fwd, cut, base.Imbalance, true)
	if slices.Equal(moved.Of, base.Of) {
		moved = nil
	}
	return base, moved, nil
}

// place assigns every value of g a layer given the forward clustering cut: the forward ops
// by cut, the rest by followForward and orderBackward.
func place(g *ir.Graph, fwd []ir.ValueID, cut []int, delta float64, readerParts bool) *Layering {
	L := len(cut) - 1
	lay := &Layering{L: L, Of: make([]int, len(g.Values)), Imbalance: delta}
	for i := range lay.Of {
		lay.Of[i] = -1
	}
	for k := range L {
		for _, id := range fwd[cut[k]:cut[k+1]] {
			lay.Of[id] = k
		}
	}
	followForward(g, lay.Of, readerParts)
	orderBackward(g, lay.Of)
	lay.account(g, fwd, cut)
	return lay
}

// cut recovers the forward clustering's cut points from the layers of the forward ops.
func (lay *Layering) cut(fwd []ir.ValueID) []int {
	cut := make([]int, lay.L+1)
	cut[lay.L] = len(fwd)
	for i := len(fwd) - 1; i >= 0; i-- {
		cut[lay.Of[fwd[i]]] = i
	}
	return cut
}

// forwardOps lists, in graph order, the non-leaf values the first output depends on.
func forwardOps(g *ir.Graph) []ir.ValueID {
	need := make([]bool, len(g.Values))
	need[g.Outputs[0].Value] = true
	for i := len(g.Values) - 1; i >= 0; i-- {
		if need[i] {
			for _, a := range g.Values[i].Args {
				need[a] = true
			}
		}
	}
	var fwd []ir.ValueID
	for i, v := range g.Values {
		if need[i] && !v.Op.IsLeaf() && v.Op != ir.OpConstant {
			fwd = append(fwd, ir.ValueID(i))
		}
	}
	return fwd
}

// defaultLayers is one layer per heavy forward op (the op table's Heavy: contractions and
// convolutions), between 1 and 16.
func defaultLayers(g *ir.Graph, fwd []ir.ValueID) int {
	n := 0
	for _, id := range fwd {
		if g.Values[id].Op.Def().Heavy {
			n++
		}
	}
	return max(1, min(16, n))
}

// clusterForward returns the L+1 cut points into fwd (layer k is fwd[cut[k]:cut[k+1]]) and
// the δ they satisfy.
func clusterForward(g *ir.Graph, fwd []ir.ValueID, L int, delta float64) ([]int, float64) {
	flops := make([]float64, len(fwd)+1) // prefix sums
	for i, id := range fwd {
		flops[i+1] = flops[i] + g.FLOPs(id)
	}
	fixed := delta > 0
	if !fixed {
		delta = 0.1
	}
	for {
		limit := (1 + delta) * flops[len(fwd)] / float64(L)
		if cut, ok := layerDP(g, fwd, L, flops, limit); ok {
			return cut, delta
		}
		if fixed {
			fixed = false // the user's δ admits no clustering: relax it, reported in Layering
		}
		delta *= 2
	}
}

// layerDP solves Alpa's recurrence under a FLOPs limit per layer; ok is false when no
// clustering into exactly L non-empty layers meets it. Ties prefer the later cut, so the
// result is deterministic.
func layerDP(g *ir.Graph, fwd []ir.ValueID, L int, flops []float64, limit float64) ([]int, bool) {
	n := len(fwd)
	inf := math.Inf(1)
	G := make([][]float64, L+1) // G[k][r]: best cost of ops fwd[:r] in k layers
	arg := make([][]int32, L+1)
	for k := range G {
		G[k], arg[k] = make([]float64, n+1), make([]int32, n+1)
		for r := range G[k] {
			G[k][r] = inf
		}
	}
	G[0][0] = 0
	pos := make([]int32, len(g.Values)) // position of a forward value in fwd, +1
	for i, id := range fwd {
		pos[id] = int32(i + 1)
	}
	in := newCrossing(g, pos)
	for r := 1; r <= n; r++ {
		in.reset(r)
		for i := r; i >= 1; i-- { // the last layer is fwd[i-1:r]
			c := in.add(fwd[i-1], i)
			if flops[r]-flops[i-1] > limit*(1+1e-12) {
				break
			}
			for k := 1; k <= min(L, i); k++ {
				if v := G[k-1][i-1] + c; v < G[k][r] {
					G[k][r], arg[k][r] = v, int32(i-1)
				}
			}
		}
	}
	if math.IsInf(G[L][n], 1) {
		return nil, false
	}
	cut := make([]int, L+1)
	cut[L] = n
	for k := L; k > 0; k-- {
		cut[k-1] = int(arg[k][cut[k]])
	}
	return cut, true
}

// crossing tracks C(i, r) for a segment growing leftwards: the bytes of values produced
// before the segment and read inside it, each counted once.
type crossing struct {
	g     *ir.Graph
	pos   []int32
	stamp []int32
	bytes float64
	r     int32
}

func newCrossing(g *ir.Graph, pos []int32) *crossing {
	return &crossing{g: g, pos: pos, stamp: make([]int32, len(g.Values))}
}

func (c *crossing) reset(r int) { c.r, c.bytes = int32(r), 0 }

// add puts op id (at position i, 1-based) into the segment and returns the segment's C.
func (c *crossing) add(id ir.ValueID, i int) float64 {
	if c.stamp[id] == c.r { // it was an input of the segment, now it is inside
		c.bytes -= float64(c.g.Values[id].Type.Bytes())
	}
	c.stamp[id] = -c.r
	for _, a := range c.g.Values[id].Args {
		if p := c.pos[a]; p == 0 || int(p) >= i || c.stamp[a] == c.r || c.stamp[a] == -c.r {
			continue // a leaf, a value inside, or one counted already
		}
		c.stamp[a] = c.r
		c.bytes += float64(c.g.Values[a].Type.Bytes())
	}
	return c.bytes
}

// followForward gives every value outside the forward ops a layer. A param, input or
// constant goes with its first forward user. A backward or update op derived from a forward
// value or param goes with it (see derivedLayer); any other goes with the earliest
// layer among its operands, where a forward activation counts at the layer of its first
// consumer (the backward op that reads it differentiates one of its consumers, not its
// producer). What is still unplaced (state, constants made for the backward) goes with its
// last user: the backward runs from the last layer to the first, so a value sent from there
// to earlier users travels the way the backward already does. The rule is a heuristic for
// balance; orderBackward then makes the placement one a pipeline can run.
func followForward(g *ir.Graph, of []int, readerParts bool) {
	users := g.Users()
	firstUser := func(id ir.ValueID, layers []int) int {
		best := -1
		for _, u := range users[id] {
			if l := layers[u]; l >= 0 && (best < 0 || l < best) {
				best = l
			}
		}
		return best
	}
	fwd := append([]int(nil), of...)
	consumer := make([]int, len(of)) // first forward consumer of a forward value
	for i := range g.Values {
		if v := &g.Values[i]; of[i] < 0 && (v.Op.IsLeaf() || v.Op == ir.OpConstant) {
			of[i] = firstUser(ir.ValueID(i), fwd)
		}
		consumer[i] = -1
		if fwd[i] >= 0 {
			consumer[i] = max(fwd[i], firstUser(ir.ValueID(i), fwd))
		}
	}
	for i := range g.Values {
		if of[i] >= 0 {
			continue
		}
		if l := derivedLayer(g, ir.ValueID(i), of, consumer, readerParts); l >= 0 {
			of[i] = l
			continue
		}
		best := -1
		for _, a := range g.Values[i].Args {
			l := of[a]
			if fwd[a] >= 0 {
				l = consumer[a]
			}
			if l >= 0 && (best < 0 || l < best) {
				best = l
			}
		}
		of[i] = best
	}
	for i := len(g.Values) - 1; i >= 0; i-- {
		if of[i] < 0 {
			of[i] = max(0, lastUser(users[i], of))
		}
	}
}

// orderBackward moves backward and update ops to earlier layers until none reads a
// backward or update value of an earlier layer: of[v] ≤ of[a] for every such operand a.
//
// A pipeline stage runs the backward of a micro-batch as one task, after the stages behind
// it have run theirs; a backward value that travels from a stage to a later one makes that
// stage's task wait for the earlier stage's, which waits for the later one's: 1F1B and
// GPipe both deadlock. followForward's rules can do that: the parts of a fanned-out adjoint
// (ir.RoleAdjointPart) go with x's consumers while their sum goes with x, so the sum sat one
// layer before the adjoint it makes (gpt-tiny's layer norms on 8 stages). The update runs
// once per stage, after every backward, and the same rule keeps its cross-stage reads
// pointing one way, so stages' updates cannot wait on each other either. Forward values
// are not moved: they are in graph order, each layer after the layers it reads from, and a
// backward op may read a forward value of any stage, which has run it by then. Leaves and
// constants are loaded or made where they are used, so they constrain nothing. One pass in
// graph order suffices: operands come before their users.
func orderBackward(g *ir.Graph, of []int) {
	fwd := make([]bool, len(g.Values))
	for _, id := range forwardOps(g) {
		fwd[id] = true
	}
	for i := range g.Values {
		v := &g.Values[i]
		if fwd[i] || v.Op.IsLeaf() || v.Op == ir.OpConstant {
			continue
		}
		for _, a := range v.Args {
			if av := &g.Values[a]; !fwd[a] && !av.Op.IsLeaf() && av.Op != ir.OpConstant {
				of[i] = min(of[i], of[a])
			}
		}
	}
}

// derivedLayer places a backward or update op by what autodiff and the optimizer recorded
// it is (ir.Prov), never by its name. The adjoint of x, and each contribution to it when x
// feeds several ops, is computed by the gradient rule of x's consumer, so it goes with that
// consumer's layer. Anything else derived from a value — a running sum of x's
// contributions, a temporary inside x's gradient rule, a param's gradient, its optimizer
// state and update ops — goes with that value's layer. This keeps a layer's backward with
// its forward even where a rule reads a value every layer shares (a causal mask, a
// constant), which the earliest-operand rule would drag to the first layer. It returns -1
// for a model value and for one shared by every param or rule (Adam's clock, autodiff's
// scalar constants).
func derivedLayer(g *ir.Graph, id ir.ValueID, of, consumer []int, readerParts bool) int {
	p := g.Values[id].Prov
	x, ok := p.OfValue()
	if !ok {
		return -1
	}
	if (p.Role == ir.RoleAdjoint || p.Role == ir.RoleAdjointPart) && consumer[x] >= 0 {
		return consumer[x]
	}
	if readerParts && p.Role == ir.RoleAdjointPart && g.Values[x].Op.IsLeaf() {
		if l := partLayer(g, id, x, of); l >= 0 {
			return l
		}
	}
	return of[x]
}

// partLayer places part, param x's adjoint part for one reader of x, where fewer bytes
// cross between layers each micro-batch: with the reader whose gradient rule made it, the
// part itself crosses to x's layer (where x's adjoint sums its parts); with x, the
// reader's values the part reads cross instead (for a tied embedding's output projection:
// the logits' adjoint, [tokens, vocab], and the final hidden state). It returns -1 where the
// part stays with x: the reader is in x's layer, no operand names it, or the part is not
// the smaller. A param read in several layers (a tied embedding: the token lookup in the
// first, the output projection in the last) has a part per reader; placed with the param
// always, the output projection's part made MoE-70B/64's first layer read 1 GB a
// micro-batch from the last (0.38 of the first stage's 0.54 s), where the part is 131 MB.
func partLayer(g *ir.Graph, part, x ir.ValueID, of []int) int {
	r := readerLayer(g, part, x, of)
	if r < 0 || r == of[x] {
		return -1
	}
	var read int64
	for _, a := range g.Values[part].Args {
		if v := &g.Values[a]; !v.Op.IsLeaf() && v.Op != ir.OpConstant && of[a] != of[x] {
			read += v.Type.Bytes()
		}
	}
	if g.Values[part].Type.Bytes() >= read {
		return -1
	}
	return r
}

// readerLayer is the layer of the reader of param x whose gradient rule made part: that of
// the forward value an operand of part derives from (the reader's adjoint or a temporary
// of its rule; an adjoint a rule passes on unchanged names the value it was made for, as
// the embedding's sum names the token lookup); -1 if no operand does.
func readerLayer(g *ir.Graph, part, x ir.ValueID, of []int) int {
	for _, a := range g.Values[part].Args {
		if c, ok := g.Values[a].Prov.OfValue(); ok && c != x && g.Values[c].Prov.Role == ir.RoleForward && of[c] >= 0 {
			return of[c]
		}
	}
	return -1
}

func lastUser(users []ir.ValueID, of []int) int {
	best := -1
	for _, u := range users {
		best = max(best, of[u])
	}
	return best
}

func (lay *Layering) account(g *ir.Graph, fwd []ir.ValueID, cut []int) {
	lay.FLOPs = make([]float64, lay.L)
	lay.InBytes = make([]int64, lay.L)
	for i := range g.Values {
		if !g.Values[i].Op.IsLeaf() {
			lay.FLOPs[lay.Of[i]] += g.FLOPs(ir.ValueID(i))
		}
	}
	seen := make(map[[2]int]bool)
	for _, id := range fwd {
		l := lay.Of[id]
		for _, a := range g.Values[id].Args {
			if la := lay.Of[a]; la < l && !g.Values[a].Op.IsLeaf() && g.Values[a].Op != ir.OpConstant && !seen[[2]int{int(a), l}] {
				seen[[2]int{int(a), l}] = true
				lay.InBytes[l] += g.Values[a].Type.Bytes()
			}
		}
	}
}
