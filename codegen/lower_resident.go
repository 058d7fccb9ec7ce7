package codegen

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Residency: the new value of a param or state is stored where the next step loads it.
// Every device of every stage that loads the target stores its own block, in the layout
// that stage loads the target in (the target's own layout on its stage, the first
// consumer's elsewhere), so that a runtime keeping the stores on the devices
// (runtime.Session) feeds each load from the device's own store, with no trip through the
// host and no copy between devices. On the update's stage the new value is resharded into
// that layout (the plan prices this as the update's edge into its target); a stage that
// loads the target but does not update it (a tied embedding on the last stage) receives
// it at the end of its update block, as a cross-stage transfer of the new value.

// loadSpec returns the layout stage s loads param or state p in, as materialize does: its
// own layout on its own stage, else that of the first op of the stage (forward, backward,
// then update ops) reading it; false when the stage does not read p.
func (l *lowerer) loadSpec(p ir.ValueID, s StageID) (mesh.Spec, bool) {
	em := l.stages[s]
	for _, ops := range [][]ir.ValueID{em.opsF, em.opsB, em.opsU} {
		for _, v := range ops {
			val := l.g.Value(v)
			if val.Op == ir.OpConstant || val.Op == ir.OpIota {
				continue
			}
			for i, a := range val.Args {
				if a != p {
					continue
				}
				if l.p.StageOf[p] == s {
					return em.st.Out[p], true
				}
				return em.st.In[v][i], true
			}
		}
	}
	return mesh.Spec{}, false
}

// nextSpec is the layout the new value u of target leaves its stage in towards another
// stage that loads target: the target's layout when the target belongs to the update's
// stage, else the new value's own, partial sums resolved.
func (l *lowerer) nextSpec(u ir.Update) mesh.Spec {
	if l.p.StageOf[u.Target] == l.p.StageOf[u.Value] {
		return l.p.outSpec(u.Target)
	}
	return mesh.Spec{Dims: l.p.outSpec(u.Value).Dims}
}

// nextTag tags the transfer of target's new value: the target's name in the update (a
// param or state is loaded where used, never sent otherwise, so the tag is free).
func (l *lowerer) nextTag(target ir.ValueID) program.Tag {
	return program.Tag{Value: l.g.Value(target).Name, MicroBatch: -1}
}

// storeUpdate stores k, the new value of target, for the next step: on this stage in the
// layout it loads target in, and sent to every other stage that loads it. A target no
// stage loads is stored in the new value's layout, partial sums resolved.
func (em *stageEm) storeUpdate(k key, target ir.ValueID) {
	l := em.l
	name := l.g.Value(target).Name
	loaded := false
	for s := range l.stages {
		spec, ok := l.loadSpec(target, StageID(s))
		if !ok {
			continue
		}
		loaded = true
		if StageID(s) == em.id {
			em.storeEverywhere(k, name, em.ensure(k, spec))
			continue
		}
		to := l.stages[s]
		src := em.ensure(k, l.nextSpec(ir.Update{Target: target, Value: k.v}))
		v := l.g.Value(k.v)
		pieces, _ := transferPieces(em.m, src.spec, to.m, absorb(to.m, v.Type.Shape, spec), v.Type.Shape)
		local := localOf(em.m, v.Type, src.spec)
		for _, ps := range pieces {
			for _, p := range ps {
				em.sendPieceTagged(k, src, local, p, to.m.Devices[p.to], l.nextTag(target))
			}
		}
	}
	if !loaded { // stored whole, as any result, its partial sums resolved
		em.storeEverywhere(k, name, em.ensure(k, mesh.Spec{Dims: em.have[k][0].spec.Dims}))
	}
}

// storeEverywhere stores b, a version of k, under name on every device of the stage, each
// its own block: replicas store too, since each loads its block next step.
func (em *stageEm) storeEverywhere(k key, name string, b *dbuf) {
	v := em.l.g.Value(k.v)
	for d := range em.progs {
		i, j := em.coord(d)
		off, err := em.m.LocalOffsets(v.Type.Shape, b.spec, i, j)
		if err != nil {
			panic("codegen: offsets of a checked layout: " + err.Error())
		}
		em.emit(d, program.Instr{Kind: program.Store, Out: program.NoBuffer, Args: []program.BufferID{b.ids[d]}, Name: name,
			Offsets: off, Full: v.Type})
	}
}

// receiveUpdates receives, at the end of the update block, the new values of the params
// and state this stage loads but another stage updates, reshards each into the layout
// this stage loads it in, and stores it on every device (see storeUpdate).
func (em *stageEm) receiveUpdates() {
	l := em.l
	for _, u := range l.g.Updates {
		from := l.p.StageOf[u.Value]
		if from == em.id {
			continue
		}
		spec, ok := l.loadSpec(u.Target, em.id)
		if !ok {
			continue
		}
		v := l.g.Value(u.Value)
		k := key{u.Value, -1}
		r := absorb(em.m, v.Type.Shape, spec)
		pieces, grids := transferPieces(l.stages[from].m, l.nextSpec(u), em.m, r, v.Type.Shape)
		ids := make([]program.BufferID, len(em.progs))
		for d := range em.progs {
			var got []program.BufferID
			for _, p := range pieces[d] {
				b := em.addBuf(d, em.name(k)+".recv", ir.Type{DType: v.Type.DType, Shape: p.ext})
				em.emit(d, program.Instr{Kind: program.Recv, Out: b, Peer: l.stages[from].m.Devices[p.from], Tag: l.nextTag(u.Target)})
				got = append(got, b)
			}
			ids[d] = em.assemble(d, k, got, grids[d], 0)
		}
		landed := &dbuf{spec: r, ids: ids}
		if em.landed == nil {
			em.landed = map[*dbuf]bool{}
		}
		em.landed[landed] = true // its all-gather finishes the transfer (TransferNote)
		b := em.reshard(k, landed, v.Type, spec)
		em.storeEverywhere(k, l.g.Value(u.Target).Name, b)
		if b != landed {
			em.free(landed.ids)
		}
		em.free(b.ids)
	}
}
