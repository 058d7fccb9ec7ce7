package sharding

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Kernel fusion (mesh.Cluster.FuseElementwise; docs/DECISIONS.md, "Kernel fusion: reductions,
// multi-output kernels, epilogues"). The step's ops are partitioned into kernels, the way a
// fusing compiler (XLA's GPU instruction, input and multi-output fusion) and Megatron-LM's
// hand-fused kernels run them, and a kernel is priced as one: it reads each of its external
// inputs once, writes each of its results that something outside it reads (or that the step
// returns or updates) once, and pays one launch. Every op keeps its own FLOPs and its own
// roofline max over the bytes it still moves (the kernel's reads are charged to their first
// reader, its writes to their producers), and the kernel's last op pays the launch.
//
// The rule, exactly. Ops are taken in graph order; op c joins the kernel of an operand p
// (its leader first, then its other operands in order) when
//
//   - p and c sit in one ILP group (c follows p's group through leaderOf, merging on,
//     neither forced), so that the group's strategy lays both out together and no resharding
//     the ILP does not see sits between them (where one does, fusedSpill prices it);
//   - c is fusible with the kernel (fusibleKind, joinable): an elementwise op, a broadcast or
//     a reshape joins any kernel but a matmul's (loop fusion); a reduction (reduce_*, softmax,
//     log_softmax, layer_norm) joins a kernel of no reduction or of reductions over the same
//     rows (input fusion into a reduction; sibling reductions in one multi-output kernel);
//   - p is not a reduction, or is a row reduction (it reduces the trailing dims, a row of at
//     most maxFusedRowBytes): a row's result is used by the block that reduced it, which is
//     how Megatron-LM's softmax and layer-norm kernels and XLA's row-normalization fusions run
//     (reduce, broadcast back along the row, elementwise). A column reduction (a bias's or
//     gamma's gradient, summing over the batch) ends its kernel;
//   - with mesh.Cluster.FuseEpilogue, a matmul's result may take cuBLASLt's epilogue: one add
//     of a bias over the result's last dim, then one gelu or relu (EPILOGUE_BIAS, GELU_BIAS,
//     RELU_BIAS, GELU_AUX_BIAS when the pre-activation is also read);
//   - joining keeps the kernel convex: no path leaves the kernel and comes back to c
//     (convex), else the kernel could not run as one launch.
//
// Leaves, slices, concats, gathers, convolutions and the rest stand alone, as before.
type fusion struct {
	kernel []int32  // the kernel's first member, per value
	write  []bool   // the value's result is written to memory
	skip   [][]bool // skip[v][i]: v does not read operand i (nil: it reads every one)
	launch []bool   // the value pays its kernel's launch (the kernel's last member)
	// scale[v][i]: v reads operand i, a broadcast, as its source (nil: 1 for every one).
	scale [][]float64
}

// maxFusedRowBytes bounds the row a fused row reduction holds on chip: 64 KiB, a thread
// block's shared memory on A100/H100 with room to spare (a 25,600-wide bf16 layer-norm row is
// 50 KiB; Megatron-LM's softmax kernel takes rows up to 2,048 keys at SC'21).
const maxFusedRowBytes = 64 << 10

// maxConvexSearch bounds the values the convexity check visits; past it the join is refused.
const maxConvexSearch = 512

// fuseKind says how an op takes part in a kernel.
type fuseKind uint8

const (
	fuseNone   fuseKind = iota // stands alone
	fuseLoop                   // elementwise, broadcast, reshape
	fuseReduce                 // a reduction or row normalization
	fuseMatmul                 // a contraction (a kernel of its own, or with its epilogue)
)

func fusibleKind(op ir.Op) fuseKind {
	switch {
	case op.Def().Category == ir.CatElementwise, op == ir.OpBroadcast, op == ir.OpReshape:
		return fuseLoop
	case op == ir.OpReduceSum, op == ir.OpReduceMean, op == ir.OpReduceMax,
		op == ir.OpSoftmax, op == ir.OpLogSoftmax, op == ir.OpLayerNorm:
		return fuseReduce
	case op.Def().Category == ir.CatContraction:
		return fuseMatmul
	}
	return fuseNone
}

// reduceSig names the rows a reduction works on: "row <rows>x<len>" when it reduces its
// operand's trailing dims (a row of at most maxFusedRowBytes), else "other <shape> <axes>".
func reduceSig(v *ir.Value, arg ir.Type) (sig string, row bool) {
	shape := arg.Shape
	r := len(shape)
	var axes []int
	switch v.Op {
	case ir.OpSoftmax, ir.OpLogSoftmax:
		axes = []int{v.Attrs.Int("axis")}
	case ir.OpLayerNorm:
		axes = []int{r - 1}
	default:
		axes = v.Attrs.Ints("axes")
	}
	trailing := len(axes) > 0
	for i, a := range axes {
		if a != r-len(axes)+i {
			trailing = false
		}
	}
	if trailing {
		n, rows := int64(1), int64(1)
		for d := range r {
			if d >= r-len(axes) {
				n *= int64(shape[d])
			} else {
				rows *= int64(shape[d])
			}
		}
		if n*int64(arg.DType.Size()) <= maxFusedRowBytes {
			return fmt.Sprintf("row %dx%d", rows, n), true
		}
	}
	return fmt.Sprintf("other %v %v", shape, axes), false
}

// kernelInfo is what joining needs to know of a kernel being built.
type kernelInfo struct {
	first  ir.ValueID
	last   ir.ValueID
	reduce string // the signature of its reductions, "" for none
	matmul bool   // a contraction with its epilogue
	bias   bool   // the epilogue's bias add is in
	act    bool   // the epilogue's activation is in
}

// fusionOf partitions g into kernels under opts; nil when the cluster does not fuse.
func fusionOf(g *ir.Graph, opts Options, cm costModel) *fusion {
	if cm.cluster == nil || !cm.cluster.FuseElementwise || cm.alpa || opts.NoMerge {
		return nil
	}
	n := len(g.Values)
	forced := func(v ir.ValueID) bool {
		_, a := opts.Force[v]
		_, b := opts.ForceSpec[v]
		return a || b
	}
	f := &fusion{kernel: make([]int32, n), write: make([]bool, n),
		skip: make([][]bool, n), launch: make([]bool, n), scale: make([][]float64, n)}
	// root: the ILP group's leader, as buildGroups merges followers (fills aside: constants
	// never fuse).
	root := make([]ir.ValueID, n)
	for id := range n {
		v := ir.ValueID(id)
		root[id] = v
		if forced(v) {
			continue
		}
		if u := leaderOf(g, v); u != ir.NoValue && !forced(u) {
			root[id] = root[u]
		}
	}
	info := map[int32]*kernelInfo{}
	kind := make([]fuseKind, n)
	isRow := make([]bool, n)
	sigOf := make([]string, n)
	for id := range n {
		f.kernel[id] = int32(id)
		v := &g.Values[id]
		kind[id] = fusibleKind(v.Op)
		if kind[id] == fuseReduce {
			sigOf[id], isRow[id] = reduceSig(v, g.Value(v.Args[0]).Type)
		}
		if kind[id] == fuseNone {
			continue
		}
		k := &kernelInfo{first: ir.ValueID(id), last: ir.ValueID(id), reduce: sigOf[id], matmul: kind[id] == fuseMatmul}
		info[int32(id)] = k
		c := ir.ValueID(id)
		for _, p := range f.candidateOperands(g, c) {
			if kind[p] == fuseNone || root[p] != root[c] {
				continue
			}
			if kind[p] == fuseReduce && !isRow[p] {
				continue // a column reduction ends its kernel
			}
			K := f.kernel[p]
			ki := info[K]
			if !joinable(g, ki, c, p, kind[id], sigOf[id], cm.cluster) || !f.convex(g, K, ki.first, c) {
				continue
			}
			f.kernel[id] = K
			delete(info, int32(id))
			ki.last = c
			if kind[id] == fuseReduce {
				ki.reduce = sigOf[id]
			}
			if ki.matmul {
				if v.Op == ir.OpAdd {
					ki.bias = true
				} else {
					ki.act = true
				}
			}
			break
		}
	}
	f.price(g, info)
	return f
}

// candidateOperands lists c's operands a kernel could take c in through: its leader first,
// then the others in slot order, each once.
func (f *fusion) candidateOperands(g *ir.Graph, c ir.ValueID) []ir.ValueID {
	var out []ir.ValueID
	if u := leaderOf(g, c); u != ir.NoValue {
		out = append(out, u)
	}
	for _, a := range g.Value(c).Args {
		dup := false
		for _, b := range out {
			dup = dup || a == b
		}
		if !dup {
			out = append(out, a)
		}
	}
	return out
}

// joinable says whether op c (of kind k, reduction signature sig) may join kernel ki
// through its operand p.
func joinable(g *ir.Graph, ki *kernelInfo, c, p ir.ValueID, k fuseKind, sig string, cl *mesh.Cluster) bool {
	if ki.matmul {
		return epilogue(g, ki, c, p, cl)
	}
	switch k {
	case fuseLoop:
		return true
	case fuseReduce:
		return ki.reduce == "" || ki.reduce == sig
	}
	return false
}

// epilogue says whether c extends a matmul kernel as cuBLASLt's epilogue does: a bias add
// on the matmul's result (the bias a vector over its last dim), then one gelu or relu.
func epilogue(g *ir.Graph, ki *kernelInfo, c, p ir.ValueID, cl *mesh.Cluster) bool {
	if !cl.FuseEpilogue {
		return false
	}
	v := g.Value(c)
	switch v.Op {
	case ir.OpAdd:
		if ki.bias || ki.act || p != ki.first {
			return false
		}
		out := g.Value(p).Type.Shape
		other := v.Args[0]
		if other == p {
			other = v.Args[1]
		}
		bs := g.Value(other).Type.Shape
		return len(out) > 0 && len(bs) == 1 && bs[0] == out[len(out)-1] && v.Type.Shape.Equal(out)
	case ir.OpGelu, ir.OpRelu:
		return !ki.act && (p == ki.first || ki.bias && p == ki.last)
	}
	return false
}

// convex reports whether c may join kernel K (first member first) without a path that
// leaves the kernel and comes back into c: it searches back from c's operands outside K,
// over values no older than first, for a member of K. A search that grows past
// maxConvexSearch values says no.
func (f *fusion) convex(g *ir.Graph, K int32, first, c ir.ValueID) bool {
	seen := map[ir.ValueID]bool{}
	var stack []ir.ValueID
	for _, a := range g.Value(c).Args {
		if f.kernel[a] != K && a > first {
			stack = append(stack, a)
		}
	}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[x] {
			continue
		}
		seen[x] = true
		if len(seen) > maxConvexSearch {
			return false
		}
		for _, a := range g.Value(x).Args {
			if f.kernel[a] == K {
				return false
			}
			if a > first && !seen[a] {
				stack = append(stack, a)
			}
		}
	}
	return true
}

// price fills in what each value reads, writes and launches from the kernels. A broadcast
// is never written (unless the step returns it): as XLA duplicates a broadcast into each
// consumer, every reader reads what it broadcasts, its source, as its own input.
func (f *fusion) price(g *ir.Graph, info map[int32]*kernelInfo) {
	n := len(g.Values)
	returned := make([]bool, n)
	for _, o := range g.Outputs {
		returned[o.Value] = true
	}
	for _, u := range g.Updates {
		returned[u.Value], returned[u.Target] = true, true
	}
	dup := func(a ir.ValueID) bool { return g.Value(a).Op == ir.OpBroadcast && !returned[a] }
	src := func(a ir.ValueID) ir.ValueID {
		for dup(a) {
			a = g.Value(a).Args[0]
		}
		return a
	}
	outside := slices.Clone(returned) // read outside its kernel, returned or updated
	readers := make([]int, n)
	last := map[int32]ir.ValueID{} // the kernel's last member that is not a broadcast
	for id := range n {
		if !dup(ir.ValueID(id)) {
			last[f.kernel[id]] = ir.ValueID(id)
		}
		if dup(ir.ValueID(id)) {
			continue
		}
		for _, a := range g.Values[id].Args {
			e := src(a)
			readers[e]++
			if f.kernel[e] != f.kernel[id] {
				outside[e] = true
			}
		}
	}
	type read struct {
		k int32
		a ir.ValueID
	}
	seen := map[read]bool{}
	for id := range n {
		v := &g.Values[id]
		k := f.kernel[id]
		if dup(ir.ValueID(id)) {
			f.skip[id] = make([]bool, len(v.Args))
			for i := range f.skip[id] {
				f.skip[id][i] = true
			}
			continue
		}
		f.write[id] = outside[id] || readers[id] == 0
		f.launch[id] = info[k] == nil || last[k] == ir.ValueID(id)
		if info[k] == nil {
			continue
		}
		var skip []bool
		for i, a := range v.Args {
			e := src(a)
			if e != a {
				if f.scale[id] == nil {
					f.scale[id] = make([]float64, len(v.Args))
					for j := range f.scale[id] {
						f.scale[id][j] = 1
					}
				}
				f.scale[id][i] = float64(g.Value(e).Type.Bytes()) / float64(g.Value(a).Type.Bytes())
			}
			r := read{k, e}
			if f.kernel[e] == k || seen[r] {
				if skip == nil {
					skip = make([]bool, len(v.Args))
				}
				skip[i] = true
			}
			seen[r] = true
		}
		f.skip[id] = skip
	}
}

// writes reports whether v's result is written to memory.
func (f *fusion) writes(v ir.ValueID) bool { return f == nil || f.write[v] }

// reads reports whether v reads its operand i from memory.
func (f *fusion) reads(v ir.ValueID, i int) bool {
	return f == nil || f.skip[v] == nil || !f.skip[v][i]
}

// readScale is the fraction of operand i's bytes v reads: for a broadcast, what it
// broadcasts (price), else 1.
func (f *fusion) readScale(v ir.ValueID, i int) float64 {
	if f == nil || f.scale[v] == nil {
		return 1
	}
	return f.scale[v][i]
}

// launches reports whether v pays its kernel's launch.
func (f *fusion) launches(v ir.ValueID) bool { return f == nil || f.launch[v] }

// internal reports whether the edge from u into v lies inside one kernel.
func (f *fusion) internal(u, v ir.ValueID) bool {
	return f != nil && u != v && f.kernel[u] == f.kernel[v]
}

// spill is the time an edge inside a kernel costs when the chosen layouts put a resharding
// on it: u's result is written after all (have bytes) and v reads it back (want bytes), at
// the device's memory bandwidth.
func (f *fusion) spill(cm costModel, have, want int64) float64 {
	if f == nil || cm.cluster == nil || cm.cluster.DeviceMemoryBandwidth <= 0 {
		return 0
	}
	return float64(have+want) / cm.cluster.DeviceMemoryBandwidth
}
