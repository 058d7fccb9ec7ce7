package codegen

import (
	"fmt"
	"strings"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Cross-stage transfers, as Alpa's cross-mesh resharding. The sender holds the value in
// its layout with partial sums resolved (S); the receiving stage wants it in the layout of
// its first consumer (T). The receiver's landing layout R is T with every unused mesh axis
// of the receiving mesh added onto some dim, so that no two receivers hold the same block.
// Each receiver's block of R is cut along the sender's block boundaries; each piece is sent
// once, by one sender holding it (replicas take turns), and the receiver concatenates the
// pieces. An all-gather inside the receiving mesh then turns R into T. So every element
// crosses between the meshes exactly once, except where R cannot absorb an axis (a scalar,
// a dim the axis does not divide): then the receivers along that axis each get a copy.

// piece is one block that crosses between two stages: from a sending device to a
// receiving device (indices in their meshes), at global offsets lo with extent ext.
type piece struct {
	from, to int
	lo, ext  []int
}

// transferPieces returns, per receiving device, its pieces in row-major order of their
// grid, and the grid's extent per dim.
func transferPieces(src *mesh.LogicalMesh, s mesh.Spec, dst *mesh.LogicalMesh, r mesh.Spec, shape []int) ([][]piece, [][]int) {
	srcLocal, err1 := src.LocalShape(shape, s)
	dstLocal, err2 := dst.LocalShape(shape, r)
	if err1 != nil || err2 != nil {
		panic(fmt.Sprintf("codegen: transfer layouts do not divide %v: %v %v", shape, err1, err2))
	}
	owners := map[string][]int{} // sender block offsets -> devices holding it, in mesh order
	for d := range src.Devices {
		i, j := d/src.Shape[1], d%src.Shape[1]
		off, _ := src.LocalOffsets(shape, s, i, j)
		k := fmt.Sprint(off)
		owners[k] = append(owners[k], d)
	}
	pieces := make([][]piece, len(dst.Devices))
	grids := make([][]int, len(dst.Devices))
	for rd := range dst.Devices {
		i, j := rd/dst.Shape[1], rd%dst.Shape[1]
		off, _ := dst.LocalOffsets(shape, r, i, j)
		segs := make([][][2]int, len(shape)) // per dim: [lo, ext] segments
		grids[rd] = make([]int, len(shape))
		for d := range shape {
			for lo := off[d]; lo < off[d]+dstLocal[d]; {
				hi := min((lo/srcLocal[d]+1)*srcLocal[d], off[d]+dstLocal[d])
				segs[d] = append(segs[d], [2]int{lo, hi - lo})
				lo = hi
			}
			grids[rd][d] = len(segs[d])
		}
		forGrid(grids[rd], func(idx []int) {
			p := piece{to: rd, lo: make([]int, len(shape)), ext: make([]int, len(shape))}
			block := make([]int, len(shape))
			for d, x := range idx {
				p.lo[d], p.ext[d] = segs[d][x][0], segs[d][x][1]
				block[d] = p.lo[d] / srcLocal[d] * srcLocal[d]
			}
			reps := owners[fmt.Sprint(block)]
			p.from = reps[rd%len(reps)]
			pieces[rd] = append(pieces[rd], p)
		})
	}
	return pieces, grids
}

// forGrid calls f on every index of a grid of the given extents, row-major.
func forGrid(ext []int, f func(idx []int)) {
	idx := make([]int, len(ext))
	for {
		f(idx)
		d := len(ext) - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < ext[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// landing returns the layout R a receiving stage gets value v of key k in: its first
// consumer's layout with the receiving mesh's unused axes absorbed.
func (l *lowerer) landing(k key, to *stageEm) mesh.Spec {
	ops := to.opsF
	ops = append(append([]ir.ValueID(nil), ops...), to.opsB...)
	if k.mb < 0 {
		ops = to.opsU
	}
	for _, op := range ops {
		for i, a := range l.g.Value(op).Args {
			if a == k.v {
				return absorb(to.m, l.g.Value(k.v).Type.Shape, to.st.In[op][i])
			}
		}
	}
	panic("codegen: a value is sent to a stage that does not use it")
}

// absorb adds every mesh axis of size > 1 that t leaves unused onto the first dim that can
// take it (an unsplit dim, or a dim split on axis 0 for axis 1) and that it divides.
func absorb(m *mesh.LogicalMesh, shape []int, t mesh.Spec) mesh.Spec {
	r := mesh.Spec{Dims: append([]mesh.AxisSet(nil), t.Dims...)}
	for a := range 2 {
		ax := mesh.AxisSet(1 << a)
		if m.Shape[a] == 1 || r.Used().Has(a) {
			continue
		}
		for d, cur := range r.Dims {
			if cur != mesh.AxesNone && !(cur == mesh.Axis0 && ax == mesh.Axis1) {
				continue
			}
			r.Dims[d] = cur | ax
			if _, err := m.LocalShape(shape, r); err == nil {
				break
			}
			r.Dims[d] = cur
		}
	}
	return r
}

// sendSpec is the layout a value leaves its stage in: its own, partial sums resolved.
func (l *lowerer) sendSpec(v ir.ValueID) mesh.Spec {
	if r, ok := l.p.Stages[l.p.StageOf[v]].Resolved[v]; ok {
		return r
	}
	s := l.p.outSpec(v)
	return mesh.Spec{Dims: s.Dims}
}

func (l *lowerer) tag(k key) program.Tag {
	return program.Tag{Value: l.g.Value(k.v).Name, MicroBatch: k.mb}
}

// send emits this stage's side of the transfer of k to stage to.
func (em *stageEm) send(k key, to *stageEm) {
	l := em.l
	v := l.g.Value(k.v)
	src := em.ensure(k, l.sendSpec(k.v))
	pieces, _ := transferPieces(em.m, src.spec, to.m, l.landing(k, to), v.Type.Shape)
	local := localOf(em.m, v.Type, src.spec)
	for _, ps := range pieces {
		for _, p := range ps {
			em.sendPiece(k, src, local, p, to.m.Devices[p.to])
		}
	}
}

// sendPiece sends one piece from its sender, slicing it out of the block first unless it
// is the whole block.
func (em *stageEm) sendPiece(k key, src *dbuf, local ir.Type, p piece, peer program.DeviceID) {
	em.sendPieceTagged(k, src, local, p, peer, em.l.tag(k))
}

// sendPieceTagged is sendPiece under the given tag.
func (em *stageEm) sendPieceTagged(k key, src *dbuf, local ir.Type, p piece, peer program.DeviceID, tag program.Tag) {
	v := em.l.g.Value(k.v)
	d := p.from
	i, j := em.coord(d)
	off, _ := em.m.LocalOffsets(v.Type.Shape, src.spec, i, j)
	buf := src.ids[d]
	whole := ir.Shape(p.ext).Equal(local.Shape)
	if !whole {
		start, limit := make([]int, len(off)), make([]int, len(off))
		for x := range off {
			start[x] = p.lo[x] - off[x]
			limit[x] = start[x] + p.ext[x]
		}
		buf = em.addBuf(d, em.name(k)+".piece", ir.Type{DType: v.Type.DType, Shape: p.ext})
		em.emit(d, program.Instr{Kind: program.Compute, Out: buf, Op: ir.OpSlice, Args: []program.BufferID{src.ids[d]},
			Attrs: ir.Attrs{}.With("start", start).With("limit", limit)})
	}
	em.emit(d, program.Instr{Kind: program.Send, Out: program.NoBuffer, Args: []program.BufferID{buf}, Peer: peer, Tag: tag})
	if !whole {
		em.emit(d, program.Instr{Kind: program.Free, Out: program.NoBuffer, Args: []program.BufferID{buf}})
	}
}

// receive emits this stage's side of the transfer of k from stage from: every device
// receives its pieces and concatenates them into its block of the landing layout.
func (em *stageEm) receive(k key, from *stageEm) {
	l := em.l
	v := l.g.Value(k.v)
	r := l.landing(k, em)
	pieces, grids := transferPieces(from.m, l.sendSpec(k.v), em.m, r, v.Type.Shape)
	local := localOf(em.m, v.Type, r)
	ids := make([]program.BufferID, len(em.progs))
	for d := range em.progs {
		var got []program.BufferID
		for _, p := range pieces[d] {
			t := ir.Type{DType: v.Type.DType, Shape: p.ext}
			b := em.addBuf(d, em.name(k)+".recv", t)
			em.emit(d, program.Instr{Kind: program.Recv, Out: b, Peer: from.m.Devices[p.from], Tag: l.tag(k)})
			got = append(got, b)
		}
		ids[d] = em.assemble(d, k, got, grids[d], 0)
		if !em.progs[d].Buffers[ids[d]].Type.Equal(local) {
			panic("codegen: assembled block has the wrong shape")
		}
	}
	landing := &dbuf{spec: r, ids: ids}
	em.have[k] = []*dbuf{landing}
	if em.landed == nil {
		em.landed = map[*dbuf]bool{}
	}
	em.landed[landing] = true
}

// TransferNote starts the Note of the collectives that finish a cross-stage transfer on
// the receiving stage (the all-gather from the landing layout to the consumer's): they are
// the transfer's, not the stage's own.
const TransferNote = "transfer of "

// IsTransfer reports whether a collective finishes a cross-stage transfer (TransferNote).
func IsTransfer(in *program.Instr) bool { return strings.HasPrefix(in.Note, TransferNote) }

// assemble concatenates a row-major grid of received pieces, dim by dim from dim d,
// freeing the parts it joins.
func (em *stageEm) assemble(d int, k key, parts []program.BufferID, grid []int, dim int) program.BufferID {
	if len(parts) == 1 {
		return parts[0]
	}
	n := grid[dim]
	stride := len(parts) / n
	var joined []program.BufferID
	for x := range n {
		joined = append(joined, em.assemble(d, k, parts[x*stride:(x+1)*stride], grid, dim+1))
	}
	if n == 1 {
		return joined[0]
	}
	p := em.progs[d]
	shape := p.Buffers[joined[0]].Type.Shape.Clone()
	for _, b := range joined[1:] {
		shape[dim] += p.Buffers[b].Type.Shape[dim]
	}
	out := em.addBuf(d, em.name(k)+".joined", ir.Type{DType: p.Buffers[joined[0]].Type.DType, Shape: shape})
	em.emit(d, program.Instr{Kind: program.Compute, Out: out, Op: ir.OpConcat, Args: joined, Attrs: ir.Attrs{}.With("axis", dim)})
	em.emit(d, program.Instr{Kind: program.Free, Out: program.NoBuffer, Args: joined})
	return out
}
