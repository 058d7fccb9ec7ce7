package sharding

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
)

// Identical layers share their node variables. Two layers are identical when their
// structural signatures are equal: the same ops with the same types and attributes in the
// same order, each operand either a value of the layer (by position) or a value outside it
// (by type and op). A group whose leader sits at position p of a layer is tied to the group
// at position p of the first identical layer, provided both groups hold the same strategies
// (the same picks per member, so the same specs and costs).
//
// Tying is exact bookkeeping for the plans it allows: every edge is still priced, an edge
// between two tied groups lands on their shared variables, and an edge from a group to its
// own counterpart (a residual stream from layer i to layer i+1) is charged on the diagonal.
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

var layerName = regexp.MustCompile(`(?:^|\.)l(\d+)\.`)

// layerOf returns every value's layer, -1 for none.
func (p *planner) layerOf() []int {
	if p.opts.Layer != nil {
		return p.opts.Layer
	}
	out := make([]int, len(p.g.Values))
	for id, v := range p.g.Values {
		out[id] = -1
		if m := layerName.FindStringSubmatch(v.Name); m != nil {
			out[id], _ = strconv.Atoi(m[1])
		}
	}
	return out
}

// tieLayers ties each layer value to the first value of an earlier layer with the same
// key and signature. A value's key is its name with the layer component replaced
// ("l3.attn.q" and "grad.l3.attn.q" become "l*.attn.q", "grad.l*.attn.q"), or with explicit
// Options.Layer its position within its layer. Its signature is its op, type, attributes
// and operands: an operand in the same layer by key, any other by op and type. Matching
// value by value rather than whole layers at once keeps the layers tied when only their
// boundary differs (the gradient flowing into layer i is summed in layer i+1's backward).
func (p *planner) tieLayers() {
	layer := p.layerOf()
	key := make([]string, len(p.g.Values))
	count := map[int]int{}
	for id, v := range p.g.Values {
		l := layer[id]
		if l < 0 {
			continue
		}
		if p.opts.Layer != nil {
			key[id] = "#" + strconv.Itoa(count[l])
			count[l]++
		} else {
			m := layerName.FindStringSubmatchIndex(v.Name)
			key[id] = v.Name[:m[2]] + "*" + v.Name[m[3]:]
		}
	}
	first := map[string]ir.ValueID{}
	for id := range p.g.Values {
		if layer[id] < 0 {
			continue
		}
		v := ir.ValueID(id)
		k := key[id] + "|" + p.signature(v, layer, key)
		if u, ok := first[k]; ok && layer[u] != layer[id] {
			p.tieGroups(u, v)
		} else if !ok {
			first[k] = v
		}
	}
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

func (p *planner) signature(id ir.ValueID, layer []int, key []string) string {
	var b strings.Builder
	v := p.g.Value(id)
	b.WriteString(v.Op.String() + " " + v.Type.String())
	for _, at := range v.Attrs {
		b.WriteString(" " + at.Name + "=" + ir.FormatAttrValue(at.Value))
	}
	for _, a := range v.Args {
		if layer[a] == layer[id] {
			b.WriteString(" " + key[a])
		} else {
			b.WriteString(" ext:" + p.g.Value(a).Op.String() + ":" + p.g.Value(a).Type.String())
		}
	}
	return b.String()
}
