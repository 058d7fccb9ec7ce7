package sharding

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Strategy is one way to run one op (or to hold one leaf) on the mesh. It is plain data:
// codegen reads In and Out to lay out operands and result, and Collectives for what the op
// itself must communicate.
type Strategy struct {
	// Name says which op dims went on which mesh axes, in Alpa's style:
	// "RS1 = RR x RS1" (output = operands), plus the op's own collective if any.
	Name string `json:"name"`
	// In is the layout each operand must have, in operand order (none for leaves).
	In []mesh.Spec `json:"in"`
	// Out is the layout of the result once Collectives are done. It is never partial.
	Out mesh.Spec `json:"out"`
	// Compute is seconds of one device's kernel: the roofline of its shard's FLOPs and
	// bytes (mesh.Cluster.OpTime), or FLOPs / shards / Options.DeviceFLOPS.
	Compute float64 `json:"compute"`
	// Comm is seconds of the op's own collectives (the sum of Collectives' Time).
	Comm float64 `json:"comm"`
	// Memory is the bytes one device holds of the result under Out.
	Memory int64 `json:"memory"`
	// Collectives are the op-internal collectives: the all-reduce or reduce-scatter of a
	// split contracted dim, and the all-reduces of the batch statistics of an op whose
	// batch is split (ir.OpDef.SyncStats).
	Collectives []OpCollective `json:"collectives,omitempty"`
}

// Cost is the strategy's own time, Compute + Comm.
func (s *Strategy) Cost() float64 { return s.Compute + s.Comm }

// OpCollective is a collective an op performs on its own result, or on the statistics it
// takes over a split batch (ir.OpDef.SyncStats).
type OpCollective struct {
	Kind mesh.Collective `json:"kind"`
	Axes mesh.AxisSet    `json:"axes"`
	// Dim is the result dim a reduce-scatter scatters onto; -1 otherwise.
	Dim int `json:"dim"`
	// Reduce is the combining function, the op row's ir.Partial: "sum" (the only one
	// offered, see ir.Partial.Lowerable). A reduce_mean split on its reduced axis divides
	// by the global count locally, then sums.
	Reduce string  `json:"reduce"`
	Bytes  float64 `json:"bytes"` // B of the alpha–beta formula
	Time   float64 `json:"time"`  // seconds
}

// costModel turns an op's work into seconds. With a cluster it is the per-op roofline
// (mesh.Cluster.OpTime, on the op's local FLOPs and the local bytes it reads and writes);
// with flops set instead, FLOPs / flops alone, the convention of the hand-checked tests.
// alpa selects Alpa's own convention (compute costs zero, heavy ops never replicate their
// work on a mesh axis), which its known-answer tests assume.
type costModel struct {
	flops   float64
	cluster *mesh.Cluster
	alpa    bool
}

// compute prices one op's kernel on one device: flops of the whole op split over shards
// devices, bytes its local operands and result hold, while hostDevices devices of its host
// compute at once (mesh.Cluster.Sharing). fused: the op runs inside a kernel another op of
// it launches (fusion.go) and pays no kernel overhead.
func (c costModel) compute(op ir.Op, class mesh.OpClass, dt ir.DType, flops float64, shards int, bytes float64, hostDevices int, fused bool) float64 {
	if c.alpa || op.Def().Category == ir.CatLeaf {
		return 0
	}
	if c.cluster == nil {
		return flops / float64(shards) / c.flops
	}
	if fused {
		return c.cluster.FusedOpTime(class, precision(dt), flops/float64(shards), bytes) * c.cluster.Sharing(class, hostDevices)
	}
	return c.cluster.OpTime(class, precision(dt), flops/float64(shards), bytes) * c.cluster.Sharing(class, hostDevices)
}

// OpClass says which of a device's FLOP rates an op instance with dims signature d runs
// at: contractions at the matmul rate, or the batched_matmul rate when a label of size
// above 1 is in every operand and the result (one GEMM per batch element); convolutions
// (forward and both gradients) at the conv rate; reductions and row normalizations at
// the reduce rate; the rest, softmax included (exponentials per element, like gelu's),
// at the vector rate. It reads the op table's category; the convolutions and softmaxes
// are named here because the table files them with the special ops and the reductions.
func OpClass(op ir.Op, d ir.Dims) mesh.OpClass {
	switch cat := op.Def().Category; {
	case cat == ir.CatContraction:
		if batched(d) {
			return mesh.ClassBatchedMatmul
		}
		return mesh.ClassMatmul
	case op == ir.OpConv2D || op == ir.OpConv2DInputGrad || op == ir.OpConv2DFilterGrad:
		return mesh.ClassConv
	case cat == ir.CatReduce && op != ir.OpSoftmax && op != ir.OpLogSoftmax:
		return mesh.ClassReduce
	}
	return mesh.ClassVector
}

// batched reports whether a label of size above 1 is in every operand of d and in its
// result.
func batched(d ir.Dims) bool {
	for l, n := range d.Sizes {
		if n <= 1 || !slices.Contains(d.Result, l) {
			continue
		}
		every := true
		for _, op := range d.Operands {
			every = every && slices.Contains(op, l)
		}
		if every && len(d.Operands) > 1 {
			return true
		}
	}
	return false
}

// precision is the arithmetic a kernel on dt runs in: f16 and bf16 at the half rate,
// everything else (f32, f64, integers) at the f32 rate.
func precision(dt ir.DType) mesh.Precision {
	if dt == ir.F16 || dt == ir.BF16 {
		return mesh.F16
	}
	return mesh.F32
}

// rule is what strategy enumeration needs to know about one op beyond its dims signature,
// read from the op's row by ruleOf.
type rule struct {
	dims ir.Dims
	// partialOK: splitting a contracted label leaves a partial result that a collective
	// can finish (ir.Partial.Lowerable). Elsewhere a contracted split is not offered.
	partialOK bool
	reduce    string // the partial's combining function: "sum"
	// scatterOK: the partial may be finished by a reduce-scatter as well as an all-reduce.
	scatterOK bool
	// heavy ops may not replicate work under Alpa's convention.
	heavy bool
}

// enumerator generates the strategies of one value.
type enumerator struct {
	g    *ir.Graph
	lm   *mesh.LogicalMesh
	cm   costModel
	fu   *fusion // nil: no fusion
	id   ir.ValueID
	v    *ir.Value
	args []ir.Type
	r    rule
	// flops and class are the op's, worked out once for all its assignments.
	flops float64
	class mesh.OpClass
	// convCut drops a convolution's reduce-scatters onto its spatial dims (convScatterCut).
	convCut bool
}

// strategiesOf returns the value's strategies, pruned, never empty: the all-replicated
// assignment is always valid, so a dim no axis divides falls back to replicated.
func strategiesOf(g *ir.Graph, lm *mesh.LogicalMesh, cm costModel, fu *fusion, id ir.ValueID, convCut bool) []Strategy {
	return newEnumerator(g, lm, cm, fu, id, convCut).strategies()
}

// newEnumerator reads what strategiesOf and leastMemory need of value id.
func newEnumerator(g *ir.Graph, lm *mesh.LogicalMesh, cm costModel, fu *fusion, id ir.ValueID, convCut bool) *enumerator {
	v := g.Value(id)
	e := &enumerator{g: g, lm: lm, cm: cm, fu: fu, id: id, v: v, args: g.ArgTypes(v), r: ruleOf(g, id), convCut: convCut}
	e.flops, e.class = g.FLOPs(id), OpClass(v.Op, e.r.dims)
	return e
}

// strategies is strategiesOf of the enumerator's value.
func (e *enumerator) strategies() []Strategy {
	v, cm, lm := e.v, e.cm, e.lm
	var out []Strategy
	for _, a := range e.assignments() {
		out = append(out, e.expand(a)...)
	}
	if cm.alpa && e.r.heavy {
		out = dropReplicatedWork(out, lm)
	}
	if len(out) == 0 {
		panic(fmt.Sprintf("sharding: value %s has no strategy", v.Name))
	}
	// Until here Name holds the suffix of the name (the op's collective); the survivors
	// of prune get their names.
	out = prune(out)
	for i := range out {
		out[i].Name = e.name(out[i], out[i].Name)
	}
	return out
}

// leastMemory is the least Memory of strategiesOf(g, lm, cm, fu, id, convCut)'s strategies,
// whatever fu, worked out without building them (PeakFloors reads nothing else of the
// candidates): the same assignments, operand and result checks, reduce-scatter variants
// and, under Alpa's cost model for a heavy op, dropReplicatedWork's choice. Memory is the
// result's local bytes, a function of its spec alone, and prune only drops a strategy for
// another of the same specs, so it does not change the least; the names and prices are
// not needed. TestLeastMemoryMatchesCandidates holds it to strategiesOf.
func leastMemory(g *ir.Graph, lm *mesh.LogicalMesh, cm costModel, id ir.ValueID, convCut bool) int64 {
	return newEnumerator(g, lm, cm, nil, id, convCut).leastMemory()
}

// leastMemory is leastMemory of the enumerator's value.
func (e *enumerator) leastMemory() int64 {
	v, lm, cm := e.v, e.lm, e.cm
	d := e.r.dims
	var want mesh.AxisSet
	for a := range 2 {
		if lm.Shape[a] > 1 {
			want |= 1 << a
		}
	}
	// all: the least over every strategy; using: over those using every axis of size > 1
	all, using := int64(-1), int64(-1)
	in := make([]mesh.Spec, len(e.args))
	for _, a := range e.assignments() {
		var inAxes mesh.AxisSet
		ok := true
		for i, t := range e.args {
			in[i] = specOf(d.Operands[i], a)
			if !e.fits(t.Shape, in[i]) {
				ok = false
				break
			}
			inAxes |= specAxes(in[i])
		}
		out := specOf(d.Result, a)
		if !ok || !e.fits(v.Type.Shape, out) {
			continue
		}
		consider := func(s mesh.Spec) {
			m := e.bytes(s)
			if all < 0 || m < all {
				all = m
			}
			if (specAxes(s)|inAxes)&want == want && (using < 0 || m < using) {
				using = m
			}
		}
		consider(out) // the strategy itself, or its all-reduce
		var partial mesh.AxisSet
		for l, ax := range a {
			if ax != 0 && contracted(d, l) {
				partial |= ax
			}
		}
		if partial == 0 || !e.r.scatterOK {
			continue
		}
		for dim, cur := range out.Dims { // finishPartial's reduce-scatters
			if !(cur == mesh.AxesNone || cur == mesh.Axis0 && partial == mesh.Axis1) {
				continue
			}
			if e.convCut && convScatterCut(v.Op, d, dim) {
				continue
			}
			rs := mesh.Spec{Dims: append([]mesh.AxisSet(nil), out.Dims...), Partial: out.Partial}
			rs.Dims[dim] |= partial
			if e.fits(v.Type.Shape, rs) {
				consider(rs)
			}
		}
	}
	if all < 0 {
		panic(fmt.Sprintf("sharding: value %s has no strategy", v.Name))
	}
	if cm.alpa && e.r.heavy && using >= 0 {
		return using
	}
	return all
}

// assignment gives each label its mesh axes.
type assignment []mesh.AxisSet

// assignments enumerates every way to give mesh axis 0 and mesh axis 1 each to at most one
// splittable label, a label taking both making S01. An axis of size 1 stays unused (it
// would only duplicate strategies); a label whose size the axes do not divide is skipped.
func (e *enumerator) assignments() []assignment {
	d := e.r.dims
	n := d.NumLabels()
	choices := func(axis int) []int {
		out := []int{-1}
		if e.lm.Shape[axis] == 1 {
			return out
		}
		for l := 0; l < n; l++ {
			if e.splittable(l) && d.Sizes[l]%e.lm.Shape[axis] == 0 {
				out = append(out, l)
			}
		}
		return out
	}
	var out []assignment
	for _, l0 := range choices(0) {
		for _, l1 := range choices(1) {
			if l0 >= 0 && l0 == l1 && d.Sizes[l0]%e.lm.Size() != 0 {
				continue
			}
			a := make(assignment, n)
			if l0 >= 0 {
				a[l0] |= mesh.Axis0
			}
			if l1 >= 0 {
				a[l1] |= mesh.Axis1
			}
			out = append(out, a)
		}
	}
	return out
}

func (e *enumerator) splittable(l int) bool {
	d := e.r.dims
	if d.Fixed[l] {
		return false
	}
	for _, x := range d.Result {
		if x == l {
			return true
		}
	}
	for _, op := range d.Operands {
		for _, x := range op {
			if x == l {
				return e.r.partialOK
			}
		}
	}
	return false
}

func specOf(labels []int, a assignment) mesh.Spec {
	s := mesh.Replicated(len(labels))
	for i, l := range labels {
		if l >= 0 {
			s.Dims[i] = a[l]
		}
	}
	return s
}

// expand turns one assignment into strategies: one when nothing contracted is split, else
// one per way of finishing the partial (all-reduce, or reduce-scatter onto a result dim).
func (e *enumerator) expand(a assignment) []Strategy {
	d := e.r.dims
	in := make([]mesh.Spec, len(e.args))
	for i, t := range e.args {
		in[i] = specOf(d.Operands[i], a)
		if !e.fits(t.Shape, in[i]) {
			return nil
		}
	}
	out := specOf(d.Result, a)
	if !e.fits(e.v.Type.Shape, out) {
		return nil
	}
	var used, partial mesh.AxisSet
	for l, ax := range a {
		used |= ax
		if ax != 0 && contracted(d, l) {
			partial |= ax
		}
	}
	base := Strategy{In: in, Out: out}
	base.Memory = e.bytes(out)
	traffic := e.operandBytes(in)
	if e.fu.writes(e.id) {
		traffic += base.Memory
	}
	base.Compute = e.cm.compute(e.v.Op, e.class, e.computeDType(), e.flops, e.lm.AxisSize(used),
		float64(traffic), e.lm.HostDevices(), !e.fu.launches(e.id))
	suffix := e.syncStats(&base)
	if partial == 0 {
		base.Name = suffix // the name's suffix until strategiesOf names it
		return []Strategy{base}
	}
	return e.finishPartial(base, partial)
}

// syncStats adds the all-reduces of an op that takes statistics over its batch (its row's
// SyncStats: batch_norm's mean and variance, one per channel each) when its batch, dim 0
// of operand 0, is split: each statistic is summed over the split's axes. It returns the
// strategy name's note of them, "" when there are none.
func (e *enumerator) syncStats(s *Strategy) string {
	k := e.v.Op.Def().SyncStats
	if k == 0 || len(s.In) == 0 || len(s.In[0].Dims) == 0 || s.In[0].Dims[0] == mesh.AxesNone {
		return ""
	}
	axes := s.In[0].Dims[0]
	local, err := e.lm.LocalShape(e.v.Type.Shape, s.Out)
	if err != nil {
		panic("sharding: local shape of a checked spec: " + err.Error())
	}
	b := float64(int64(local[1]) * int64(e.v.Type.DType.Size()))
	for range k {
		s.addCollective(e.lm, OpCollective{Kind: mesh.AllReduce, Axes: axes, Dim: -1, Reduce: "sum", Bytes: b})
	}
	return fmt.Sprintf(" (sync all_reduce %s ×%d)", axes.Digits(), k)
}

// finishPartial offers the all-reduce and every valid reduce-scatter of a partial result.
func (e *enumerator) finishPartial(base Strategy, partial mesh.AxisSet) []Strategy {
	B := float64(base.Memory)
	ar := base.clone()
	ar.addCollective(e.lm, OpCollective{Kind: mesh.AllReduce, Axes: partial, Dim: -1, Reduce: e.r.reduce, Bytes: B})
	ar.Name = " (all_reduce " + partial.Digits() + ")" // the name's suffix until strategiesOf names it
	out := []Strategy{ar}
	if !e.r.scatterOK {
		return out
	}
	for dim, cur := range base.Out.Dims {
		if !(cur == mesh.AxesNone || cur == mesh.Axis0 && partial == mesh.Axis1) {
			continue
		}
		if e.convCut && convScatterCut(e.v.Op, e.r.dims, dim) {
			continue
		}
		rs := base.clone()
		rs.Out.Dims[dim] |= partial
		if !e.fits(e.v.Type.Shape, rs.Out) {
			continue
		}
		rs.Memory = e.bytes(rs.Out)
		rs.addCollective(e.lm, OpCollective{Kind: mesh.ReduceScatter, Axes: partial, Dim: dim, Reduce: e.r.reduce, Bytes: B})
		rs.Name = " (reduce_scatter " + partial.Digits() + " dim " + strconv.Itoa(dim) + ")"
		out = append(out, rs)
	}
	return out
}

func (s *Strategy) addCollective(lm *mesh.LogicalMesh, c OpCollective) {
	c.Time = lm.Cost(c.Kind, c.Axes, c.Bytes)
	s.Collectives = append(s.Collectives, c)
	s.Comm += c.Time
}

func (s Strategy) clone() Strategy {
	s.In = append([]mesh.Spec(nil), s.In...)
	s.Out = mesh.Spec{Dims: append([]mesh.AxisSet(nil), s.Out.Dims...), Partial: s.Out.Partial}
	s.Collectives = append([]OpCollective(nil), s.Collectives...)
	return s
}

func specAxes(s mesh.Spec) mesh.AxisSet {
	var u mesh.AxisSet
	for _, d := range s.Dims {
		u |= d
	}
	return u
}

func contracted(d ir.Dims, l int) bool {
	for _, x := range d.Result {
		if x == l {
			return false
		}
	}
	return true
}

// fits reports whether the spec is valid and divides the shape.
func (e *enumerator) fits(shape ir.Shape, s mesh.Spec) bool {
	if s.Validate() != nil {
		return false
	}
	_, err := e.lm.LocalShape(shape, s)
	return err == nil
}

func (e *enumerator) bytes(s mesh.Spec) int64 {
	b, err := e.lm.LocalBytes(e.v.Type.Shape, e.v.Type.DType.Size(), s)
	if err != nil {
		panic("sharding: local bytes of a checked spec: " + err.Error())
	}
	return b
}

// operandBytes is what one device reads of the op's operands laid out as in, less what
// its kernel does not read from memory for it (fusion.go): operands made inside the kernel,
// and inputs another op of the kernel reads already.
func (e *enumerator) operandBytes(in []mesh.Spec) int64 {
	var sum int64
	for i, t := range e.args {
		if !e.fu.reads(e.id, i) {
			continue
		}
		b, err := e.lm.LocalBytes(t.Shape, t.DType.Size(), in[i])
		if err != nil {
			panic("sharding: local bytes of a checked spec: " + err.Error())
		}
		if s := e.fu.readScale(e.id, i); s != 1 {
			b = int64(float64(b) * s) // a broadcast, read as its source
		}
		sum += b
	}
	return sum
}

// computeDType is the dtype the op's arithmetic runs in: its first operand's (a
// contraction's inputs, not a comparison's bool result), or its result's for a leaf.
func (e *enumerator) computeDType() ir.DType {
	if len(e.args) > 0 {
		return e.args[0].DType
	}
	return e.v.Type.DType
}

func (e *enumerator) name(s Strategy, suffix string) string {
	if len(s.In) == 0 {
		return specName(s.Out)
	}
	parts := make([]string, len(s.In))
	for i, in := range s.In {
		parts[i] = specName(in)
	}
	return specName(s.Out) + " = " + strings.Join(parts, " x ") + suffix
}

// specName prints a scalar's empty spec as "-" so names stay readable.
func specName(s mesh.Spec) string {
	if t := s.String(); t != "" {
		return t
	}
	return "-"
}

// dropReplicatedWork keeps, under Alpa's convention, only the strategies of a heavy op
// that use every mesh axis of size > 1, unless none does (a dim no axis divides).
func dropReplicatedWork(ss []Strategy, lm *mesh.LogicalMesh) []Strategy {
	var want mesh.AxisSet
	for a := range 2 {
		if lm.Shape[a] > 1 {
			want |= 1 << a
		}
	}
	var out []Strategy
	for _, s := range ss {
		used := specAxes(s.Out)
		for _, in := range s.In {
			used |= specAxes(in)
		}
		if used&want == want {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return ss
	}
	return out
}

// prune drops dominated strategies. The exact rule: t is dominated by s when both have the
// same operand specs and the same output spec — so every resharding cost to and from them
// is the same, row for row — and s costs no more in Compute+Comm and in Memory. Among equals
// the first is kept. Strategies with any spec different are never compared, so pruning
// cannot lose the optimum. The order of the survivors is the generation order, which is
// what Options.Force indexes. It filters ss in place (a survivor only moves to an earlier
// slot, one already read), and copies the survivors out when they fill under half of it.
func prune(ss []Strategy) []Strategy {
	best := map[specsKey]int{}
	out := ss[:0]
	for _, s := range ss {
		key := specKeyOf(s)
		j, seen := best[key]
		if !seen {
			best[key] = len(out)
			out = append(out, s)
			continue
		}
		if s.Cost() < out[j].Cost() || s.Cost() == out[j].Cost() && s.Memory < out[j].Memory {
			out[j] = s
		}
	}
	if len(out) < cap(ss)/2 {
		return slices.Clone(out)
	}
	clear(ss[len(out):]) // what the dropped ones refer to is garbage
	return out
}

// specsKey identifies a strategy by its specs alone: their specBits when the op has at most
// five operands, else the text of specKey.
type specsKey struct {
	bits [6]uint64
	long string
}

func specKeyOf(s Strategy) specsKey {
	var k specsKey
	if len(s.In) >= len(k.bits) || !packable(s.Out) || slices.ContainsFunc(s.In, func(in mesh.Spec) bool { return !packable(in) }) {
		k.long = specKey(s)
		return k
	}
	k.bits[0] = specBits(s.Out)
	for i, in := range s.In {
		k.bits[i+1] = specBits(in)
	}
	return k
}

// specKey identifies a strategy by its specs alone, as text (any rank).
func specKey(s Strategy) string {
	var b strings.Builder
	b.WriteString(s.Out.String())
	for _, in := range s.In {
		b.WriteByte('|')
		b.WriteString(in.String())
	}
	return b.String()
}

// packable reports whether specBits can pack s (rank 31 at most).
func packable(s mesh.Spec) bool { return len(s.Dims) <= 31 }
