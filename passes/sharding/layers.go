package sharding

import (
	"encoding/binary"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// Identical layers share their node variables. A layer is a model block: the values the
// graph's builder marked with one ir.Block (a transformer layer, an MoE layer), with
// everything autodiff, the optimizer and the other passes derived from them. Two values of
// different blocks correspond when their keys (BlockKeys) and signatures are equal: the
// same ops with the same types and attributes, each operand either a value of the block (by
// key) or a value outside it (by type and op). A group whose leader has a counterpart in
// an earlier block is tied to that counterpart's group, provided both groups hold the same
// strategies (the same picks per member, so the same specs and costs). A graph that marks
// no blocks ties nothing: names are never read.
//
// Tying is exact bookkeeping for the plans it allows: every edge is still priced, an edge
// between two tied groups lands on their shared variables, and an edge from a group to its
// own counterpart (a residual stream from block i to block i+1) is charged on the diagonal.
// What it gives up is the plans where identical layers differ — typically the first or last
// layer of a stack choosing a different boundary layout. Its optimum is therefore an upper
// bound on the joint optimum; TestLayersOnceGap measures the gap on small stacks.

// tie sets rep: each group shares the variables of its representative.
func (p *planner) tie() {
	p.rep = make([]int, len(p.groups))
	for i := range p.rep {
		p.rep[i] = i
	}
	if p.opts.SolveLayersOnce {
		p.tieLayers()
	}
}

// tieLayers ties each group led by a block value to the group of its counterpart.
func (p *planner) tieLayers() {
	block, any := p.g.Blocks()
	if !any {
		return
	}
	keys := p.opts.BlockKeys
	if keys == nil {
		keys = BlockKeys(p.g)
	}
	for v, u := range counterparts(p.g, block, keys) {
		if u != ir.NoValue {
			p.tieGroups(u, ir.ValueID(v))
		}
	}
}

// counterparts maps each value of a block to the first value of an earlier block with the
// same key and signature, or to NoValue. Matching value by value rather than whole blocks
// at once keeps the blocks tied where only their boundary differs (the gradient flowing
// into block i is summed in block i+1's backward).
func counterparts(g *ir.Graph, block []ir.Block, keys []uint64) []ir.ValueID {
	out := make([]ir.ValueID, len(g.Values))
	key := make([]string, len(g.Values))
	for id := range g.Values {
		key[id] = strconv.FormatUint(keys[id], 16)
	}
	first := map[string]ir.ValueID{}
	for id := range g.Values {
		out[id] = ir.NoValue
		if block[id] == ir.NoBlock {
			continue
		}
		v := ir.ValueID(id)
		k := key[id] + "|" + signature(g, v, block, key)
		if u, ok := first[k]; ok && block[u] != block[id] {
			out[id] = u
		} else if !ok {
			first[k] = v
		}
	}
	return out
}

// BlockKeys names each value of g by what it is within its block, the same for the
// corresponding values of identical blocks, and never by its name (0 outside blocks):
//
//   - a value derived from another of its block (ir.Prov: a gradient, an adjoint or one
//     contribution to it, a temporary of a gradient rule, optimizer state, an update op) by
//     its role and slot, the key of that value and its rank among the values so derived;
//   - any other (the model's own values, a cast the precision pass added) by its op, type
//     and attributes and its rank among the values of its block alike.
//
// Ranks count in graph order, so a key is a place in the block as its builder laid the
// block out, not the structure upstream of it: the first block, fed by the embedding, and
// the last, read by the head, still match the others value by value.
//
// A stage graph that passes.Subgraph cut out of a training step should be tied by the
// keys of the whole step (Options.BlockKeys): a block the cut splits has lost the values
// that rank its own, and an adjoint whose forward value stayed in another stage has lost
// the value it is derived from.
func BlockKeys(g *ir.Graph) []uint64 {
	block, _ := g.Blocks()
	k := &keyer{g: g, block: block, key: make([]uint64, len(g.Values)), done: make([]bool, len(g.Values)),
		rank: map[[2]uint64]uint64{}}
	for id := range g.Values {
		if block[id] != ir.NoBlock {
			k.keyOf(ir.ValueID(id))
		}
	}
	return k.key
}

type keyer struct {
	g     *ir.Graph
	block []ir.Block
	key   []uint64
	done  []bool
	// rank counts the values of a block with one base key: rank[{block, base}].
	rank map[[2]uint64]uint64
}

func (k *keyer) keyOf(id ir.ValueID) uint64 {
	if k.done[id] {
		return k.key[id]
	}
	k.done[id] = true // a value's key never depends on itself: this ends any cycle of Of
	v := &k.g.Values[id]
	h := newHash()
	if of, ok := v.Prov.OfValue(); ok && k.block[of] == k.block[id] {
		h.str("derived").num(uint64(v.Prov.Role)).str(v.Prov.Slot).num(k.keyOf(of))
	} else {
		h.str("built").str(v.Op.String()).str(v.Type.String()).num(uint64(v.Prov.Role)).str(v.Prov.Slot)
		for _, at := range v.Attrs {
			h.str(at.Name).str(ir.FormatAttrValue(at.Value))
		}
	}
	base := h.sum()
	r := [2]uint64{uint64(k.block[id]), base}
	k.key[id] = newHash().num(base).num(k.rank[r]).sum() | 1 // never 0, the key of no block
	k.rank[r]++
	return k.key[id]
}

// hasher is FNV-1a over length-prefixed fields, so that no two field lists collide by
// concatenation.
type hasher struct{ b []byte }

func newHash() *hasher { return &hasher{} }

func (h *hasher) str(s string) *hasher {
	h.b = binary.AppendUvarint(h.b, uint64(len(s)))
	h.b = append(h.b, s...)
	return h
}

func (h *hasher) num(n uint64) *hasher {
	h.b = binary.AppendUvarint(h.b, n)
	return h
}

func (h *hasher) sum() uint64 {
	f := fnv.New64a()
	f.Write(h.b)
	return f.Sum64()
}

// tieGroups ties the group led by v to the group led by its counterpart u.
func (p *planner) tieGroups(u, v ir.ValueID) {
	gu, gv := p.groupOf[u], p.groupOf[v]
	if p.memberIdx[u] != 0 || p.memberIdx[v] != 0 || p.rep[gu] == p.rep[gv] {
		return
	}
	a, b := p.groups[gu], p.groups[gv]
	if len(a.strats) != len(b.strats) || len(a.members) != len(b.members) {
		return
	}
	for k := range a.strats {
		for m := range a.strats[k].pick {
			if a.strats[k].pick[m] != b.strats[k].pick[m] {
				return
			}
		}
	}
	p.rep[gv] = p.rep[gu]
}

// signature is a value's op, type, attributes and operands: one of its block by key, any
// other by op and type.
func signature(g *ir.Graph, id ir.ValueID, block []ir.Block, key []string) string {
	var b strings.Builder
	v := g.Value(id)
	b.WriteString(v.Op.String() + " " + v.Type.String())
	for _, at := range v.Attrs {
		b.WriteString(" " + at.Name + "=" + ir.FormatAttrValue(at.Value))
	}
	for _, a := range v.Args {
		if block[a] == block[id] {
			b.WriteString(" " + key[a])
		} else {
			b.WriteString(" ext:" + g.Value(a).Op.String() + ":" + g.Value(a).Type.String())
		}
	}
	return b.String()
}
