package codegen

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Transfer is one value crossing from one stage to another as Lower's programs send it:
// once per micro-batch, or (PerStep) once per step from the update block, in pieces
// (transferPieces) from the devices of From to those of To.
type Transfer struct {
	Value    ir.ValueID
	From, To StageID
	PerStep  bool
	Pieces   int   // sends (= receives) of one transfer, over every device
	Bytes    int64 // their bytes
	// Received lists, per device of To's mesh (in mesh order), the bytes of each piece it
	// receives: what a price of the transfer on the receiving side needs.
	Received [][]int64
}

// Transfers lists the cross-stage transfers of p's programs, worked out from the plan as
// Lower works them out (who produces what per micro-batch and in the update, the layout a
// value leaves its stage in and lands in), without emitting the programs: the values each
// stage sends per micro-batch and in the update, and the new values of params and state
// another stage loads. The all-gathers that then finish a transfer inside the receiving
// mesh are not listed. The errors are Lower's.
func Transfers(p *Plan) (out []Transfer, err error) {
	an, _, err := check(p)
	if err != nil {
		return nil, err
	}
	defer func() {
		if caught(recover(), &err) {
			out = nil
		}
	}()
	l := newLowerer(p, an)
	add := func(v ir.ValueID, from, to StageID, perStep bool, s, r mesh.Spec) {
		shape := l.g.Value(v).Type.Shape
		pieces, _ := transferPieces(l.stages[from].m, s, l.stages[to].m, r, shape)
		t := Transfer{Value: v, From: from, To: to, PerStep: perStep, Received: make([][]int64, len(pieces))}
		for d, ps := range pieces {
			for _, pc := range ps {
				b := ir.Shape(pc.ext).NumElements() * int64(l.g.Value(v).Type.DType.Size())
				t.Pieces++
				t.Bytes += b
				t.Received[d] = append(t.Received[d], b)
			}
		}
		out = append(out, t)
	}
	for vid := range l.g.Values {
		v := ir.ValueID(vid)
		from := p.StageOf[v]
		ph := an.phase[v]
		if ph == phaseF || ph == phaseB { // produced per micro-batch (produced, mb ≥ 0)
			for _, to := range an.usedIn[v][0] {
				if to != from {
					add(v, from, to, false, l.sendSpec(v), l.landing(key{v, 0}, l.stages[to]))
				}
			}
		}
		// produced in the update: its ops, and the accumulated values (beginUpdate)
		if ph == phaseU || an.alsoU[v] || an.acc[v] && (ph == phaseF || ph == phaseB) {
			for _, to := range an.usedIn[v][1] {
				if to != from {
					add(v, from, to, true, l.sendSpec(v), l.landing(key{v, -1}, l.stages[to]))
				}
			}
		}
	}
	for _, u := range l.g.Updates { // receiveUpdates
		from := p.StageOf[u.Value]
		for s := range l.stages {
			to := StageID(s)
			if to == from {
				continue
			}
			if spec, ok := l.loadSpec(u.Target, to); ok {
				add(u.Value, from, to, true, l.nextSpec(u), absorb(l.stages[to].m, l.g.Value(u.Value).Type.Shape, spec))
			}
		}
	}
	return out, nil
}
