package codegen

import (
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// ensure returns a version of k in layout want, making it from the cheapest version the
// stage holds (by mesh.ReshardCost), or first loading or receiving k.
func (em *stageEm) ensure(k key, want mesh.Spec) *dbuf {
	if len(em.have[k]) == 0 {
		em.materialize(k, want)
	}
	v := em.l.g.Value(k.v)
	t := v.Type
	resolved := em.resolve(k, want)
	var best *dbuf
	bestTime := 0.0
	for _, b := range em.have[k] {
		if b.spec.Equal(want) {
			return b
		}
	}
	if v.Op == ir.OpInput {
		// An input is loaded in every layout its consumers read, as the sharding pass
		// prices it (its layouts are slices of the feed): no collective moves it.
		out := em.loadBuf(k, want)
		em.have[k] = append(em.have[k], out)
		return out
	}
	for _, b := range em.have[k] {
		if resolved && b.spec.Partial != 0 {
			continue // its sums are resolved once, into the layout the plan priced
		}
		r, err := mesh.ReshardCost(em.m, t.Shape, t.DType.Size(), b.spec, want)
		if err != nil {
			continue
		}
		if best == nil || r.Time < bestTime {
			best, bestTime = b, r.Time
		}
	}
	if best == nil {
		fail("value %s: no collectives turn its layouts on stage %d into %s", em.l.g.Value(k.v).Name, em.id, want)
	}
	out := em.reshard(k, best, t, want)
	if out != best {
		em.have[k] = append(em.have[k], out)
	}
	return out
}

// resolve makes, for a value of this stage that the plan resolves (Stage.Resolved) and
// want is not its partial layout, the resolved version from the partial one if there is
// none yet; it reports whether k's partial versions are to be skipped.
func (em *stageEm) resolve(k key, want mesh.Spec) bool {
	r, ok := em.st.Resolved[k.v]
	if !ok || em.l.p.StageOf[k.v] != em.id || want.Partial != 0 {
		return false
	}
	var partial *dbuf
	for _, b := range em.have[k] {
		if b.spec.Partial == 0 {
			return true
		}
		partial = b
	}
	if partial == nil {
		return false
	}
	t := em.l.g.Value(k.v).Type
	var out *dbuf
	if st, ok := resolveStep(partial.spec, r); ok {
		out = em.step(k, partial, t, st, "")
	} else {
		out = em.reshard(k, partial, t, r)
	}
	if out != partial {
		em.have[k] = append(em.have[k], out)
	}
	return true
}

// resolveStep is the one collective that resolves the partial sums of layout from into
// layout to as the sharding pass prices an op's own (its finishPartial): an all-reduce
// over every partial axis, or a reduce-scatter of them onto one dim. ok is false when to
// is neither; the cheapest path of mesh.ReshardCost, which may take the axes one at a
// time, is then taken.
func resolveStep(from, to mesh.Spec) (mesh.Step, bool) {
	a := from.Partial
	if a == 0 || to.Partial != 0 || len(from.Dims) != len(to.Dims) {
		return mesh.Step{}, false
	}
	st := mesh.Step{Kind: mesh.AllReduce, Axes: a, Dim: -1, ToDim: -1, After: to}
	for d := range from.Dims {
		if from.Dims[d] == to.Dims[d] {
			continue
		}
		cur := from.Dims[d]
		if st.Kind != mesh.AllReduce || to.Dims[d] != cur|a || !(cur == mesh.AxesNone || cur == mesh.Axis0 && a == mesh.Axis1) {
			return mesh.Step{}, false
		}
		st.Kind, st.Dim = mesh.ReduceScatter, d
	}
	return st, true
}

// materialize makes the first version of k on this stage: a load for a leaf, a fill for a
// constant, a receive for any other value of another stage.
func (em *stageEm) materialize(k key, want mesh.Spec) {
	l := em.l
	v := l.g.Value(k.v)
	switch {
	case v.Op == ir.OpInput:
		em.load(k, want)
	case v.Op == ir.OpParam || v.Op == ir.OpState:
		if l.p.StageOf[k.v] == em.id {
			want = em.st.Out[k.v]
		}
		em.load(k, want)
	case madeWhereUsed(v) && l.p.StageOf[k.v] != em.id:
		ids := em.newBuf(em.name(k), localOf(em.m, v.Type, want))
		em.each(func(d int) program.Instr {
			return program.Instr{Kind: program.Constant, Out: ids[d], Value: v.Attrs.Float("value")}
		})
		em.have[k] = []*dbuf{{spec: want, ids: ids}}
	case l.p.StageOf[k.v] != em.id:
		em.receive(k, l.stages[l.p.StageOf[k.v]])
	default:
		panic("codegen: value " + v.Name + " is used before it is computed")
	}
	uses := em.usesM[k.v]
	switch {
	case em.update:
		uses = em.usesU[k.v]
	case k.mb < 0:
		return // a param or state: kept for every micro-batch and the update
	case em.remat != nil && em.remat.backward:
		uses = em.remat.uses[k.v]
	case em.remat != nil && em.stageInput(k.v):
		return // a recomputing stage's input: counted when its forward ends (dropActivations)
	case em.remat != nil:
		uses = em.remat.usesF[k.v]
	}
	em.left[k] = uses
}

// load defines k in layout s from the feed of its name: each device loads its block, an
// input at its micro-batch's offset along the batch dim (a stride per micro-batch).
func (em *stageEm) load(k key, s mesh.Spec) {
	em.have[k] = []*dbuf{em.loadBuf(k, s)}
}

// loadBuf loads k in layout s as load does and returns the version.
func (em *stageEm) loadBuf(k key, s mesh.Spec) *dbuf {
	v := em.l.g.Value(k.v)
	local := localOf(em.m, v.Type, s)
	ids := em.newBuf(em.name(k), local)
	em.each(func(d int) program.Instr {
		i, j := em.coord(d)
		off, err := em.m.LocalOffsets(v.Type.Shape, s, i, j)
		if err != nil {
			panic("codegen: offsets of a checked layout: " + err.Error())
		}
		in := program.Instr{Kind: program.Load, Out: ids[d], Name: v.Name, Offsets: off}
		if b := v.BatchDim(); b >= 0 && k.mb >= 0 {
			in.Stride = make([]int, len(off))
			in.Stride[b] = v.Type.Shape[b]
		}
		return in
	})
	return &dbuf{spec: s, ids: ids}
}

// reshard lowers the steps of mesh.ReshardCost from src to want. An all-reduce updates its
// buffer in place, so a first step that is one turns src itself into the reduced layout.
func (em *stageEm) reshard(k key, src *dbuf, t ir.Type, want mesh.Spec) *dbuf {
	r, err := mesh.ReshardCost(em.m, t.Shape, t.DType.Size(), src.spec, want)
	if err != nil {
		fail("value %s: %v", em.l.g.Value(k.v).Name, err)
	}
	note := ""
	if em.landed[src] {
		note = TransferNote + em.l.g.Value(k.v).Name
	}
	cur := src
	for _, st := range r.Steps {
		next := em.step(k, cur, t, st, note)
		if cur != src && next != cur {
			em.free(cur.ids)
		}
		cur = next
	}
	return cur
}

// step lowers one resharding step on every device.
func (em *stageEm) step(k key, cur *dbuf, t ir.Type, st mesh.Step, note string) *dbuf {
	if st.Kind == mesh.AllReduce {
		if note == "" {
			note = em.l.g.Value(k.v).Name
		}
		em.each(func(d int) program.Instr {
			return program.Instr{Kind: program.AllReduce, Out: program.NoBuffer, Args: []program.BufferID{cur.ids[d]},
				Group: em.group(st.Axes, d), Note: note}
		})
		cur.spec = st.After
		return cur
	}
	oldLocal := localOf(em.m, t, cur.spec)
	local := localOf(em.m, t, st.After)
	next := &dbuf{spec: st.After, ids: em.newBuf(em.name(k)+"."+specText(st.After), local)}
	em.each(func(d int) program.Instr {
		in := program.Instr{Out: next.ids[d], Args: []program.BufferID{cur.ids[d]}, Note: note}
		switch st.Kind {
		case mesh.Slice:
			i, j := em.coord(d)
			start := make([]int, len(local.Shape))
			limit := append([]int(nil), oldLocal.Shape...)
			start[st.Dim] = em.m.ShardIndex(st.Axes, i, j) * local.Shape[st.Dim]
			limit[st.Dim] = start[st.Dim] + local.Shape[st.Dim]
			in.Kind, in.Op = program.Compute, ir.OpSlice
			in.Attrs = ir.Attrs{}.With("start", start).With("limit", limit)
		case mesh.AllGather:
			in.Kind, in.Axis, in.Group = program.AllGather, st.Dim, em.group(st.Axes, d)
		case mesh.ReduceScatter:
			in.Kind, in.Axis, in.Group = program.ReduceScatter, st.Dim, em.group(st.Axes, d)
		case mesh.AllToAll:
			in.Kind, in.Axis, in.ConcatAxis, in.Group = program.AllToAll, st.ToDim, st.Dim, em.group(st.Axes, d)
		default:
			panic("codegen: unknown resharding step " + st.String())
		}
		return in
	})
	return next
}

// group returns the group of device index d along axes, in rank order.
func (em *stageEm) group(axes mesh.AxisSet, d int) []program.DeviceID {
	me := em.m.Devices[d]
	for _, g := range em.m.Groups(axes) {
		if program.Rank(g, me) >= 0 {
			return g
		}
	}
	panic("codegen: device in no group of its own mesh")
}

// store writes k in layout want (partial sums resolved) as the result name: one device per
// distinct block (the one at coordinate 0 on every axis the layout does not use) stores it.
func (em *stageEm) store(k key, name string, want mesh.Spec) {
	v := em.l.g.Value(k.v)
	b := em.ensure(k, want)
	used := want.Used()
	for d := range em.progs {
		i, j := em.coord(d)
		if (!used.Has(0) && i != 0) || (!used.Has(1) && j != 0) {
			continue
		}
		off, err := em.m.LocalOffsets(v.Type.Shape, want, i, j)
		if err != nil {
			panic("codegen: offsets of a checked layout: " + err.Error())
		}
		em.emit(d, program.Instr{Kind: program.Store, Out: program.NoBuffer, Args: []program.BufferID{b.ids[d]}, Name: name,
			Offsets: off, Full: v.Type})
	}
}

// iota computes an iota block as cumsum(ones) − ones along its axis, plus the block's
// offset when the axis is split, in f64 (exact for any realistic extent), then cast.
func (em *stageEm) iota(k key, local ir.Type, out mesh.Spec) []program.BufferID {
	v := em.l.g.Value(k.v)
	axis := v.Attrs.Int("axis")
	f := ir.Type{DType: ir.F64, Shape: local.Shape}
	ones := em.newBuf(em.name(k)+".ones", f)
	em.each(func(d int) program.Instr { return program.Instr{Kind: program.Constant, Out: ones[d], Value: 1} })
	cs := em.newBuf(em.name(k)+".cumsum", f)
	em.each(func(d int) program.Instr {
		return program.Instr{Kind: program.Compute, Out: cs[d], Op: ir.OpCumsum, Args: []program.BufferID{ones[d]}, Attrs: ir.Attrs{}.With("axis", axis)}
	})
	idx := em.newBuf(em.name(k)+".f64", f)
	em.each(func(d int) program.Instr {
		return program.Instr{Kind: program.Compute, Out: idx[d], Op: ir.OpSub, Args: []program.BufferID{cs[d], ones[d]}}
	})
	em.free(ones, cs)
	if a := out.Dims[axis]; a != mesh.AxesNone {
		off := em.newBuf(em.name(k)+".offset", f)
		em.each(func(d int) program.Instr {
			i, j := em.coord(d)
			return program.Instr{Kind: program.Constant, Out: off[d], Value: float64(em.m.ShardIndex(a, i, j) * local.Shape[axis])}
		})
		sum := em.newBuf(em.name(k)+".shifted", f)
		em.each(func(d int) program.Instr {
			return program.Instr{Kind: program.Compute, Out: sum[d], Op: ir.OpAdd, Args: []program.BufferID{idx[d], off[d]}}
		})
		em.free(idx, off)
		idx = sum
	}
	if local.DType == ir.F64 {
		return idx
	}
	res := em.newBuf(em.name(k), local)
	em.each(func(d int) program.Instr {
		return program.Instr{Kind: program.Compute, Out: res[d], Op: ir.OpCast, Args: []program.BufferID{idx[d]}, Attrs: ir.Attrs{}.With("to", local.DType)}
	})
	em.free(idx)
	return res
}
