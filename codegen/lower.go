package codegen

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Lower turns a plan into one Program per device, in Plan.Devices order.
//
// Each stage's program has four blocks: a prologue that loads the params and state its
// ops read (in every layout they ask for) and zeroes the gradient accumulators; the
// forward and the backward of one micro-batch (the stage's forward ops, then its backward
// ops, in graph order), run per micro-batch; and the update, once. The schedule (see
// StageLoops) runs the micro-batch blocks in loops in GPipe or 1F1B order, so a
// program's size does not grow with the micro-batch count. Around every op it inserts
// what the strategy needs:
//
//   - operands in the layout the op asks for: loads (inputs take their micro-batch's slice
//     along the batch dim, directly in the consumer's layout; params and state are loaded
//     in their stored layout), the collectives of mesh.ReshardCost between the layout a
//     value has and the one asked for, or receives from the stage that produced it;
//   - after a gradient or the loss: an accumulate into a buffer kept across micro-batches,
//     scaled by 1/B at the start of the update; the scaled gradients and the loss are
//     stored under their names, the updated params and state under the target's name;
//   - frees after the last use of every buffer, per micro-batch.
//
// Cross-stage values go as Alpa's cross-mesh resharding (see transferPieces): the sender
// resolves partial sums, every element crosses once, from one sender to one receiver, and
// an all-gather inside the receiving mesh builds the layout its consumer asks for.
//
// Errors: a plan that is malformed, names a strategy CheckStrategy refuses, or whose
// stage assignment deadlocks the schedule. The same plan gives the same programs, byte
// for byte.
func Lower(p *Plan) (progs []*program.Program, err error) {
	an, loops, err := check(p)
	if err != nil {
		return nil, err
	}
	defer func() {
		if caught(recover(), &err) {
			progs = nil
		}
	}()
	l := newLowerer(p, an)
	for s, em := range l.stages {
		em.lower(loops[s])
		progs = append(progs, em.progs...)
	}
	for _, prog := range progs {
		if err := prog.Validate(); err != nil {
			panic(fmt.Sprintf("codegen: lowered an invalid program: %v", err))
		}
	}
	return progs, nil
}

// lower emits the stage's blocks and gives its programs the schedule loops.
func (em *stageEm) lower(loops []program.Loop) {
	em.block("prologue", false, em.prologue)
	em.block("forward", true, func() {
		em.runTask(task{phaseF, 0})
		if em.st.Recompute {
			em.dropActivations()
		}
	})
	em.block("backward", true, func() {
		if em.remat != nil {
			em.remat.backward = true
		}
		em.runTask(task{phaseB, 0})
		em.freeMicrobatch()
	})
	em.block("update", false, func() {
		em.runTask(task{phaseU, -1})
		em.receiveUpdates()
		em.freeAll()
	})
	for _, p := range em.progs {
		p.Microbatches = em.l.p.Microbatches
		p.Schedule = loops
	}
}

// block emits one block on every device of the stage: what f emits, with the buffers it
// declares per micro-batch when perMB. The micro-batch blocks are emitted for micro-batch
// 0, which in them stands for the micro-batch they run for: tags and load strides are
// relative to it.
func (em *stageEm) block(name string, perMB bool, f func()) {
	start := make([]int, len(em.progs))
	for d, p := range em.progs {
		start[d] = len(p.Instrs)
	}
	em.perMB = perMB
	f()
	em.perMB = false
	for d, p := range em.progs {
		p.Blocks = append(p.Blocks, program.Block{Name: name, Start: start[d], End: len(p.Instrs), PerMicrobatch: perMB})
	}
}

// prologue loads every param and state the stage's forward and backward ops read, in each
// layout they ask for, and zeroes the accumulators, so that the micro-batch blocks only
// read what is of the step.
func (em *stageEm) prologue() {
	g := em.l.g
	for _, ops := range [][]ir.ValueID{em.opsF, em.opsB} {
		for _, v := range ops {
			val := g.Value(v)
			if val.Op == ir.OpConstant || val.Op == ir.OpIota {
				continue
			}
			for i, a := range val.Args {
				if op := g.Value(a).Op; op == ir.OpParam || op == ir.OpState {
					em.ensure(key{a, -1}, em.st.In[v][i])
				}
			}
		}
	}
	for _, ops := range [][]ir.ValueID{em.opsF, em.opsB} {
		for _, v := range ops {
			if !em.l.an.acc[v] {
				continue
			}
			spec := em.st.Out[v]
			acc := &dbuf{spec: spec, ids: em.newBuf(g.Value(v).Name+".acc", localOf(em.m, g.Value(v).Type, spec))}
			em.each(func(d int) program.Instr { return program.Instr{Kind: program.Constant, Out: acc.ids[d]} })
			em.accs[v] = acc
		}
	}
}

// freeMicrobatch frees what of the micro-batch is still live at the end of its backward.
func (em *stageEm) freeMicrobatch() {
	for d, p := range em.progs {
		var args []program.BufferID
		for b, live := range em.live[d] {
			if live && p.Buffers[b].PerMicrobatch {
				args = append(args, program.BufferID(b))
			}
		}
		if len(args) > 0 {
			em.emit(d, program.Instr{Kind: program.Free, Out: program.NoBuffer, Args: args})
		}
	}
	for k := range em.have {
		if k.mb >= 0 {
			delete(em.have, k)
			delete(em.left, k)
		}
	}
}

// lowerError carries a user-facing error out of the emitter's depths to Lower.
type lowerError struct{ err error }

// caught reports whether r, a recovered panic, is a lowerError, and sets *err to its
// error; any other panic goes on.
func caught(r any, err *error) bool {
	if r == nil {
		return false
	}
	le, ok := r.(lowerError)
	if !ok {
		panic(r)
	}
	*err = le.err
	return true
}

func fail(format string, args ...any) {
	panic(lowerError{fmt.Errorf("codegen: "+format, args...)})
}

type lowerer struct {
	p        *Plan
	g        *ir.Graph
	an       *analysis
	stages   []*stageEm
	isUpdate []bool // value is the new content of some param or state
	isOutput []bool
}

func newLowerer(p *Plan, an *analysis) *lowerer {
	g := p.Step
	l := &lowerer{p: p, g: g, an: an, isUpdate: make([]bool, len(g.Values)), isOutput: make([]bool, len(g.Values))}
	for _, u := range g.Updates {
		l.isUpdate[u.Value] = true
	}
	for _, o := range g.Outputs {
		l.isOutput[o.Value] = true
	}
	for s := range p.Stages {
		l.stages = append(l.stages, newStageEm(l, StageID(s)))
	}
	return l
}

// key names one tensor of the step: a value for the micro-batch a block runs for (mb 0 in
// the micro-batch blocks, which stands for it), or (mb −1) a
// value of the update, a param or state, or an accumulated gradient after scaling.
type key struct {
	v  ir.ValueID
	mb int
}

// dbuf is one version of a value on a stage: its layout, and the buffer that holds each
// device's block, by device index in the stage's mesh.
type dbuf struct {
	spec mesh.Spec
	ids  []program.BufferID
}

// stageEm emits the programs of one stage. Its devices run the same instructions on their
// own blocks (SPMD), except for the pieces of cross-stage transfers.
type stageEm struct {
	l     *lowerer
	id    StageID
	st    *Stage
	m     *mesh.LogicalMesh
	progs []*program.Program
	live  [][]bool // per device, per buffer
	have  map[key][]*dbuf
	left  map[key]int // remaining uses; absent: kept until the update
	accs  map[ir.ValueID]*dbuf
	// landed marks the versions received from another stage, in their landing layout.
	landed map[*dbuf]bool
	// usesM and usesU count operand uses on this stage per micro-batch and in the update.
	usesM, usesU []int
	opsF, opsB   []ir.ValueID
	opsU         []ir.ValueID
	update       bool // emitting the update task
	perMB        bool // emitting a micro-batch block
	// remat is the recomputation of a Recompute stage (nil otherwise); redo is set while
	// the backward block re-runs the forward.
	remat *remat
	redo  bool
}

// stageInput reports whether v is a value of another stage's forward or backward that
// this stage receives (not a leaf it loads, not a constant it fills itself).
func (em *stageEm) stageInput(v ir.ValueID) bool {
	val := em.l.g.Value(v)
	return em.l.p.StageOf[v] != em.id && !val.Op.IsLeaf() && !madeWhereUsed(val)
}

func newStageEm(l *lowerer, id StageID) *stageEm {
	st := &l.p.Stages[id]
	n := len(l.g.Values)
	em := &stageEm{l: l, id: id, st: st, m: st.Mesh, have: map[key][]*dbuf{}, left: map[key]int{},
		accs: map[ir.ValueID]*dbuf{}, usesM: make([]int, n), usesU: make([]int, n)}
	for _, d := range st.Mesh.Devices {
		em.progs = append(em.progs, &program.Program{Device: d})
		em.live = append(em.live, nil)
	}
	for vid := range l.g.Values {
		v := ir.ValueID(vid)
		if l.p.StageOf[v] != id {
			continue
		}
		ph := l.an.phase[v]
		switch ph {
		case phaseF:
			em.opsF = append(em.opsF, v)
		case phaseB:
			em.opsB = append(em.opsB, v)
		}
		if ph == phaseF || ph == phaseB {
			for _, a := range l.g.Value(v).Args {
				em.usesM[a]++
			}
		}
		if ph == phaseU || l.an.alsoU[v] {
			em.opsU = append(em.opsU, v)
			for _, a := range l.g.Value(v).Args {
				em.usesU[a]++
			}
		}
	}
	if st.Recompute {
		em.remat = newRemat(em)
	}
	return em
}

func (em *stageEm) runTask(t task) {
	switch t.ph {
	case phaseF:
		for _, v := range em.opsF {
			em.compute(v, t.mb)
		}
	case phaseB:
		for _, v := range em.opsB {
			if em.remat != nil {
				em.recomputeFor(v)
			}
			em.compute(v, t.mb)
		}
	case phaseU:
		em.beginUpdate()
		for _, v := range em.opsU {
			em.compute(v, -1)
		}
	}
}

// keyOf is the key operand a of an op of micro-batch mb reads.
func (em *stageEm) keyOf(a ir.ValueID, mb int) key {
	if op := em.l.g.Value(a).Op; mb < 0 || op == ir.OpParam || op == ir.OpState {
		return key{a, -1}
	}
	return key{a, mb}
}

// name is the name of k's buffers: the value's (a micro-batch's buffers are declared per
// micro-batch).
func (em *stageEm) name(k key) string { return em.l.g.Value(k.v).Name }

// compute emits value v of micro-batch mb (−1: the update) with its operands in place.
func (em *stageEm) compute(v ir.ValueID, mb int) {
	g := em.l.g
	val := g.Value(v)
	k := key{v, mb}
	out := em.st.Out[v]
	local := localOf(em.m, val.Type, out)
	var ids []program.BufferID
	switch val.Op {
	case ir.OpConstant:
		ids = em.newBuf(em.name(k), local)
		em.each(func(d int) program.Instr {
			return program.Instr{Kind: program.Constant, Out: ids[d], Value: val.Attrs.Float("value")}
		})
	case ir.OpIota:
		ids = em.iota(k, local, out)
	default:
		in := em.st.In[v]
		args := make([][]program.BufferID, len(val.Args))
		for i, a := range val.Args {
			args[i] = em.ensure(em.keyOf(a, mb), in[i]).ids
		}
		if val.Op == ir.OpBatchNorm && in[0].Dims[0] != mesh.AxesNone {
			ids = em.batchNormSync(k, local, args, in[0].Dims[0])
			break
		}
		if val.Op == ir.OpGather && in[0].Dims[0] != mesh.AxesNone {
			ids = em.gatherShard(k, local, args[0], args[1], in[0].Dims[0], localOf(em.m, g.Value(val.Args[0]).Type, in[0]).Shape[0])
			break
		}
		ids = em.newBuf(em.name(k), local)
		at := localAttrs(val, local)
		em.each(func(d int) program.Instr {
			ins := program.Instr{Kind: program.Compute, Out: ids[d], Op: val.Op, Attrs: at}
			for _, a := range args {
				ins.Args = append(ins.Args, a[d])
			}
			return ins
		})
		if val.Op == ir.OpReduceMean && out.Partial != 0 {
			ids = em.scale(ids, local, 1/float64(em.m.AxisSize(out.Partial)), em.name(k)+".scaled")
		}
	}
	em.have[k] = []*dbuf{{spec: out, ids: ids}}
	em.produced(k)
	for _, a := range val.Args {
		em.use(em.keyOf(a, mb))
	}
}

// produced runs what follows a value's production: accumulation, sends to the stages that
// use it, stores, and the count of local uses (freeing it at once if there are none).
func (em *stageEm) produced(k key) {
	l := em.l
	stages := l.an.usedIn[k.v][0]
	uses := em.usesM[k.v]
	switch {
	case k.mb < 0:
		stages, uses = l.an.usedIn[k.v][1], em.usesU[k.v]
	case em.redo:
		// Recomputed: the forward accumulated and sent it already.
		stages, uses = nil, em.remat.uses[k.v]
	default:
		if em.remat != nil {
			uses = em.remat.usesOf(k.v)
		}
		if l.an.acc[k.v] {
			em.accumulate(k)
		}
	}
	for _, t := range stages {
		if t != em.id {
			em.send(k, l.stages[t])
		}
	}
	if k.mb < 0 {
		em.stores(k)
	}
	if em.remat != nil && em.remat.keeps(k, em.redo) {
		return // a checkpoint: counted when the forward ends (dropActivations)
	}
	em.left[k] = uses
	if uses == 0 {
		em.release(k)
	}
}

// stores writes what the step returns: updated params and state (under the target's
// name, where the next step loads them: storeUpdate), outputs, and the scaled gradients
// (in their resolved layout).
func (em *stageEm) stores(k key) {
	g := em.l.g
	for _, u := range g.Updates {
		if u.Value == k.v {
			em.storeUpdate(k, u.Target)
		}
	}
	if em.l.isOutput[k.v] || em.l.an.acc[k.v] {
		em.store(k, g.Value(k.v).Name, em.resolvedSpec(k))
	}
}

// resolvedSpec is the layout k's partial sums resolve into: Stage.Resolved's, or k's
// current layout without its partial axes.
func (em *stageEm) resolvedSpec(k key) mesh.Spec {
	if r, ok := em.st.Resolved[k.v]; ok && em.l.p.StageOf[k.v] == em.id {
		return r
	}
	return mesh.Spec{Dims: em.have[k][0].spec.Dims}
}

// use counts one use of k; the last frees every version of it.
func (em *stageEm) use(k key) {
	n, ok := em.left[k]
	if !ok {
		return
	}
	if n <= 1 {
		em.release(k)
		return
	}
	em.left[k] = n - 1
}

// release frees every version of k on every device.
func (em *stageEm) release(k key) {
	var bufs [][]program.BufferID
	for _, b := range em.have[k] {
		bufs = append(bufs, b.ids)
	}
	em.free(bufs...)
	delete(em.have, k)
	delete(em.left, k)
}

// beginUpdate scales the accumulators into the update's gradients and loss, and starts
// counting the update's uses of the params and state loaded so far.
func (em *stageEm) beginUpdate() {
	em.update = true
	g := em.l.g
	for vid := range g.Values {
		k := key{ir.ValueID(vid), -1}
		if _, ok := em.have[k]; ok {
			em.left[k] = em.usesU[vid]
			if em.usesU[vid] == 0 {
				em.release(k)
			}
		}
	}
	for vid := range g.Values {
		v := ir.ValueID(vid)
		acc, ok := em.accs[v]
		if !ok {
			continue
		}
		k := key{v, -1}
		ids := acc.ids
		if b := em.l.p.Microbatches; b > 1 {
			ids = em.scale(ids, localOf(em.m, g.Value(v).Type, acc.spec), 1/float64(b), em.name(k))
		}
		em.have[k] = []*dbuf{{spec: acc.spec, ids: ids}}
		em.produced(k)
	}
}

// accumulate adds the fresh value of k into its accumulator, which the prologue zeroed.
func (em *stageEm) accumulate(k key) {
	cur := em.have[k][0]
	acc, ok := em.accs[k.v]
	if !ok || !acc.spec.Equal(cur.spec) {
		panic("codegen: no accumulator in the layout of " + em.l.g.Value(k.v).Name)
	}
	em.each(func(d int) program.Instr {
		return program.Instr{Kind: program.Accumulate, Out: program.NoBuffer, Args: []program.BufferID{acc.ids[d], cur.ids[d]}}
	})
}

// scale returns x·f in new buffers and frees x.
func (em *stageEm) scale(x []program.BufferID, t ir.Type, f float64, name string) []program.BufferID {
	c := em.newBuf(name+".factor", t)
	em.each(func(d int) program.Instr { return program.Instr{Kind: program.Constant, Out: c[d], Value: f} })
	out := em.newBuf(name, t)
	em.each(func(d int) program.Instr {
		return program.Instr{Kind: program.Compute, Out: out[d], Op: ir.OpMul, Args: []program.BufferID{x[d], c[d]}}
	})
	em.free(x, c)
	return out
}

// gatherShard is gather on a shard of the table's rows (rows rows from the shard's offset,
// split on axes): each device looks up the ids that fall in its rows and gives zeros for
// the others, so the devices' results sum to the lookup: the partial sum CheckStrategy
// expects. As instructions, with r = ids − offset:
//
//	in = where(r >= 0, r < rows, false)    safe = where(in, r, 0)
//	res = where(reshape(in, ids' shape + 1s), gather(table, safe), 0)
func (em *stageEm) gatherShard(k key, local ir.Type, table, idx []program.BufferID, axes mesh.AxisSet, rows int) []program.BufferID {
	g := em.l.g
	idT := g.Value(g.Value(k.v).Args[1]).Type.DType
	idShape := local.Shape[:len(local.Shape)-(len(g.Value(g.Value(k.v).Args[0]).Type.Shape)-1)]
	scalar := func(name string, dt ir.DType, val func(d int) float64) []program.BufferID {
		c := em.newBuf(em.name(k)+"."+name, ir.Type{DType: dt})
		em.each(func(d int) program.Instr { return program.Instr{Kind: program.Constant, Out: c[d], Value: val(d)} })
		return c
	}
	compute := em.computeEach
	ids := ir.Type{DType: idT, Shape: idShape}
	mask := ir.Type{DType: ir.Bool, Shape: idShape}
	off := scalar("offset", idT, func(d int) float64 {
		i, j := em.coord(d)
		return float64(em.m.ShardIndex(axes, i, j) * rows)
	})
	zero := scalar("zero", idT, func(int) float64 { return 0 })
	limit := scalar("rows", idT, func(int) float64 { return float64(rows) })
	base := em.name(k)
	rel := compute(base+".rel", ids, ir.OpSub, nil, idx, off)
	ge := compute(base+".ge", mask, ir.OpGe, nil, rel, zero)
	lt := compute(base+".lt", mask, ir.OpLt, nil, rel, limit)
	em.free(off, limit)
	in := compute(base+".in", mask, ir.OpWhere, nil, ge, lt, ge)
	em.free(ge, lt)
	safe := compute(base+".safe", ids, ir.OpWhere, nil, in, rel, zero)
	em.free(rel, zero)
	rowsT := compute(base+".rows", local, ir.OpGather, nil, table, safe)
	em.free(safe)
	shape := append(slices.Clone([]int(idShape)), slices.Repeat([]int{1}, len(local.Shape)-len(idShape))...)
	inR := compute(base+".inb", ir.Type{DType: ir.Bool, Shape: ir.Shape(shape)}, ir.OpReshape, ir.Attrs{}.With("shape", shape), in)
	em.free(in)
	fzero := scalar("fzero", local.DType, func(int) float64 { return 0 })
	res := compute(base, local, ir.OpWhere, nil, inR, rowsT, fzero)
	em.free(inR, rowsT, fzero)
	return res
}

// newBuf declares one buffer of type t on every device of the stage.
// computeEach emits op on every device of the stage into a new buffer named name of type t
// (each device's block), its operands each device's own block of args.
func (em *stageEm) computeEach(name string, t ir.Type, op ir.Op, at ir.Attrs, args ...[]program.BufferID) []program.BufferID {
	out := em.newBuf(name, t)
	em.each(func(d int) program.Instr {
		ins := program.Instr{Kind: program.Compute, Out: out[d], Op: op, Attrs: at}
		for _, a := range args {
			ins.Args = append(ins.Args, a[d])
		}
		return ins
	})
	return out
}

func (em *stageEm) newBuf(name string, t ir.Type) []program.BufferID {
	ids := make([]program.BufferID, len(em.progs))
	for d := range em.progs {
		ids[d] = em.addBuf(d, name, t)
	}
	return ids
}

// addBuf declares a buffer on device index d: of the micro-batch in a micro-batch block,
// else of the step.
func (em *stageEm) addBuf(d int, name string, t ir.Type) program.BufferID {
	p := em.progs[d]
	p.Buffers = append(p.Buffers, program.BufferDecl{Name: name, Type: t, PerMicrobatch: em.perMB})
	em.live[d] = append(em.live[d], false)
	return program.BufferID(len(p.Buffers) - 1)
}

// emit appends one instruction to device d's program, tracking liveness.
func (em *stageEm) emit(d int, in program.Instr) {
	if in.Out != program.NoBuffer && in.Kind != program.AllReduce {
		em.live[d][in.Out] = true
	}
	if in.Kind == program.Free {
		for _, b := range in.Args {
			em.live[d][b] = false
		}
	}
	em.progs[d].Instrs = append(em.progs[d].Instrs, in)
}

// each emits f(d) on every device d of the stage.
func (em *stageEm) each(f func(d int) program.Instr) {
	for d := range em.progs {
		em.emit(d, f(d))
	}
}

// free releases the given per-device buffer sets in one instruction per device.
func (em *stageEm) free(sets ...[]program.BufferID) {
	for d := range em.progs {
		var args []program.BufferID
		for _, s := range sets {
			if s != nil && em.live[d][s[d]] && !contains(args, s[d]) {
				args = append(args, s[d])
			}
		}
		if len(args) > 0 {
			em.emit(d, program.Instr{Kind: program.Free, Out: program.NoBuffer, Args: args})
		}
	}
}

// freeAll frees every buffer still live at the end of the program.
func (em *stageEm) freeAll() {
	for d := range em.progs {
		var args []program.BufferID
		for b, live := range em.live[d] {
			if live {
				args = append(args, program.BufferID(b))
			}
		}
		if len(args) > 0 {
			em.emit(d, program.Instr{Kind: program.Free, Out: program.NoBuffer, Args: args})
		}
	}
}

// coord returns the mesh coordinate of device index d.
func (em *stageEm) coord(d int) (int, int) { return d / em.m.Shape[1], d % em.m.Shape[1] }

func contains(bs []program.BufferID, b program.BufferID) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}
