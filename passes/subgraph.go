package passes

import (
	"fmt"

	"github.com/autopar/autopar/ir"
)

// Subgraph cuts the values ids (in graph order) out of g as a graph of their own, the unit
// one pipeline stage is sharded as. Leaves the ops use come along; a value of g the ops
// read but ids lack becomes a data input of the same name and type (it arrives from another
// stage), with its batch dim marked where it carries the batch. Values that g's other ops,
// outputs or updates read stay live as outputs; g's updates whose target and value are both
// inside are kept. It returns an error if ids is not in graph order.
func Subgraph(g *ir.Graph, name string, ids []ir.ValueID) (*ir.Graph, error) {
	in := make([]bool, len(g.Values))
	for i, id := range ids {
		if i > 0 && id <= ids[i-1] {
			return nil, fmt.Errorf("subgraph %s: values are not in graph order at %s", name, g.Values[id].Name)
		}
		in[id] = true
	}
	batch := BatchDims(g)
	sub := ir.NewGraph(name)
	local := make(map[ir.ValueID]ir.ValueID, len(ids))
	bring := func(a ir.ValueID) error {
		if _, ok := local[a]; ok {
			return nil
		}
		v := &g.Values[a]
		var id ir.ValueID
		var err error
		switch {
		case in[a] || v.Op.IsLeaf() || v.Op == ir.OpConstant || v.Op == ir.OpIota:
			id, err = sub.Append(v.Op, v.Name, nil, v.Attrs, v.Pos)
		default:
			id, err = sub.Declare(ir.OpInput, v.Name, v.Type, batch[a], v.Pos)
		}
		local[a] = id
		return err
	}
	for _, id := range ids {
		v := &g.Values[id]
		if len(v.Args) == 0 {
			if err := bring(id); err != nil {
				return nil, err
			}
			continue
		}
		args := make([]ir.ValueID, len(v.Args))
		for i, a := range v.Args {
			if err := bring(a); err != nil {
				return nil, err
			}
			args[i] = local[a]
		}
		nid, err := sub.Append(v.Op, v.Name, args, v.Attrs, v.Pos)
		if err != nil {
			return nil, err
		}
		local[id] = nid
	}
	keepMarks(g, sub, local)
	markLive(g, sub, in, local)
	return sub, nil
}

// keepMarks gives each value of sub its block and provenance in g, with Of mapped to sub's
// IDs (a param comes in at its first use, which may follow its gradient); Of becomes
// NoValue where the value it names stayed outside sub (the forward value of a gradient
// computed in another stage), and the value keeps its block. A data input standing for a
// value of another stage keeps that value's block and provenance: it is the same tensor.
func keepMarks(g, sub *ir.Graph, local map[ir.ValueID]ir.ValueID) {
	for old, id := range local {
		sub.Value(id).Block = g.Values[old].Block
		p := g.Values[old].Prov
		if of, ok := p.OfValue(); ok {
			p.Of = ir.NoValue
			if l, in := local[of]; in {
				p.Of = l
			}
		}
		sub.SetProv(id, p)
	}
}

// markLive makes outputs of the values of sub that the rest of g needs, and keeps g's
// updates that lie inside.
func markLive(g, sub *ir.Graph, in []bool, local map[ir.ValueID]ir.ValueID) {
	live := make([]bool, len(g.Values))
	for i := range g.Values {
		if in[i] {
			continue
		}
		for _, a := range g.Values[i].Args {
			live[a] = true
		}
	}
	for _, o := range g.Outputs {
		live[o.Value] = true
	}
	for _, u := range g.Updates {
		_, t := local[u.Target]
		if in[u.Value] && t {
			sub.AddUpdate(local[u.Target], local[u.Value], u.Pos)
		} else {
			live[u.Value] = true
		}
	}
	for i := range g.Values {
		if id, ok := local[ir.ValueID(i)]; ok && in[i] && live[i] {
			sub.AddOutput(id, g.Values[i].Pos)
		}
	}
}
