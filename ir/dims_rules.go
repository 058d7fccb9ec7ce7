package ir

// The dims signatures the op table points at. See Dims for what a label means.

// dimsFresh gives the result one free label per dim and every operand -1: leaves and ops
// whose operands no rule describes.
func dimsFresh(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	b.d.Result = b.labels(res.Shape)
	b.d.Operands = make([][]int, len(args))
	for i, a := range args {
		b.d.Operands[i] = fill(a.Shape.Rank(), -1)
	}
	return b.d
}

func fill(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// dimsIota fixes the iota axis: a shard would need its offset.
func dimsIota(args []Type, at Attrs, res Type) Dims {
	d := dimsFresh(args, at, res)
	d.Fixed[d.Result[at.Int("axis")]] = true
	return d
}

// dimsBroadcasting aligns operands on the right against the result; a stretched size-1 dim
// takes no label.
func dimsBroadcasting(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	b.d.Result = b.labels(res.Shape)
	for _, a := range args {
		ls := make([]int, a.Shape.Rank())
		off := res.Shape.Rank() - a.Shape.Rank()
		for i, n := range a.Shape {
			ls[i] = -1
			if n == res.Shape[off+i] {
				ls[i] = b.d.Result[off+i]
			}
		}
		b.d.Operands = append(b.d.Operands, ls)
	}
	return b.d
}

// dimsDropout fixes every dim: an element's mask depends on its global element index, which
// the local compute of a shard does not have.
func dimsDropout(args []Type, at Attrs, res Type) Dims {
	d := dimsBroadcasting(args, at, res)
	for l := range d.Fixed {
		d.Fixed[l] = true
	}
	return d
}

func dimsMatMul(args []Type, _ Attrs, _ Type) Dims {
	var b dimsBuilder
	m := b.label(args[0].Shape[0], false)
	k := b.label(args[0].Shape[1], false)
	n := b.label(args[1].Shape[1], false)
	b.d.Operands = [][]int{{m, k}, {k, n}}
	b.d.Result = []int{m, n}
	return b.d
}

func dimsEinsum(args []Type, at Attrs, _ Type) Dims {
	es, err := parseEinsum(at.String("spec"), len(args))
	if err != nil {
		panic("ir: einsum dims on an unverified spec: " + err.Error())
	}
	var b dimsBuilder
	label := map[rune]int{}
	get := func(c rune, size int) int {
		if l, ok := label[c]; ok {
			return l
		}
		label[c] = b.label(size, false)
		return label[c]
	}
	for i, s := range es.operands {
		ls := make([]int, 0, len(s))
		for j, c := range s {
			ls = append(ls, get(c, args[i].Shape[j]))
		}
		b.d.Operands = append(b.d.Operands, ls)
	}
	for _, c := range es.result {
		b.d.Result = append(b.d.Result, label[c])
	}
	return b.d
}

// dimsReduce: splitting a reduced axis leaves a partial result (sum; for max and mean the
// sharding pass decides whether it can combine partials).
func dimsReduce(args []Type, at Attrs, _ Type) Dims {
	var b dimsBuilder
	in := b.labels(args[0].Shape)
	b.d.Operands = [][]int{in}
	axes := at.Ints("axes")
	for i, l := range in {
		if !containsInt(axes, i) {
			b.d.Result = append(b.d.Result, l)
		}
	}
	return b.d
}

func containsInt(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// dimsAlongAxis: softmax, log_softmax and cumsum need the whole axis.
func dimsAlongAxis(args []Type, at Attrs, _ Type) Dims {
	var b dimsBuilder
	in := b.labels(args[0].Shape)
	b.d.Fixed[in[at.Int("axis")]] = true
	b.d.Operands = [][]int{in}
	b.d.Result = in
	return b.d
}

// dimsNorm: x's normalized dims are fixed; gamma and beta follow the channel dim.
func dimsNorm(channelDim func(Shape) int, fixAllButChannel bool) func([]Type, Attrs, Type) Dims {
	return func(args []Type, _ Attrs, _ Type) Dims {
		var b dimsBuilder
		in := b.labels(args[0].Shape)
		c := channelDim(args[0].Shape)
		for i, l := range in {
			b.d.Fixed[l] = (i == c) != fixAllButChannel
		}
		b.d.Operands = [][]int{in, {in[c]}, {in[c]}}
		b.d.Result = in
		return b.d
	}
}

// dimsBatchNorm is batch_norm's "n c h* w*, c, c -> n c h* w*": a channel is normalized
// over the batch and the spatial dims. The spatial dims stay whole; the batch may be split,
// its statistics then all-reduced inside the op (OpDef.SyncStats). A batch_norm whose
// statistics run over groups of rows (BatchNormGroup) keeps its batch whole: "n*".
func dimsBatchNorm(args []Type, at Attrs, res Type) Dims {
	d := dimsNorm(batchNormChannel, true)(args, at, res)
	d.Fixed[d.Result[0]] = BatchNormGroup(args[0].Shape, at) > 0
	return d
}

// BatchNormGroup returns the rows of dim 0 of x (shaped s) that one set of a batch_norm's
// statistics runs over when they are fewer than the whole dim (attribute group), or 0 when
// the statistics run over the whole dim 0.
func BatchNormGroup(s Shape, at Attrs) int {
	v, _ := at.Get("group")
	k, _ := v.(int)
	if k <= 0 || len(s) == 0 || k >= s[0] {
		return 0
	}
	return k
}

func dimsTranspose(args []Type, at Attrs, _ Type) Dims {
	var b dimsBuilder
	in := b.labels(args[0].Shape)
	b.d.Operands = [][]int{in}
	for _, p := range at.Ints("perm") {
		b.d.Result = append(b.d.Result, in[p])
	}
	return b.d
}

func dimsBroadcast(args []Type, at Attrs, res Type) Dims {
	var b dimsBuilder
	b.d.Result = b.labels(res.Shape)
	in := make([]int, args[0].Shape.Rank())
	for i, d := range at.Ints("dims") {
		in[i] = -1
		if args[0].Shape[i] == res.Shape[d] {
			in[i] = b.d.Result[d]
		}
	}
	b.d.Operands = [][]int{in}
	return b.d
}

// dimsSlice shares the dims a slice keeps whole; a cut dim is fixed on both sides.
func dimsSlice(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	in := make([]int, args[0].Shape.Rank())
	for i, n := range args[0].Shape {
		if n == res.Shape[i] {
			in[i] = b.label(n, false)
			b.d.Result = append(b.d.Result, in[i])
			continue
		}
		in[i] = b.label(n, true)
		b.d.Result = append(b.d.Result, b.label(res.Shape[i], true))
	}
	b.d.Operands = [][]int{in}
	return b.d
}

func dimsConcat(args []Type, at Attrs, res Type) Dims {
	var b dimsBuilder
	ax := at.Int("axis")
	b.d.Result = b.labels(res.Shape)
	b.d.Fixed[b.d.Result[ax]] = true
	for range args {
		ls := append([]int(nil), b.d.Result...)
		ls[ax] = -1
		b.d.Operands = append(b.d.Operands, ls)
	}
	return b.d
}

// dimsReshape maps dim groups: where one dim of one side equals a group of dims on the
// other (a merge or a split), the major dim of the group shares the single dim's label, so
// splitting the major dim matches a contiguous block split of the merged dim. Dims that
// correspond to nothing are fixed (result) or -1 (operand).
func dimsReshape(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	in, out := args[0].Shape, res.Shape
	li, lo := fill(len(in), -1), fill(len(out), -1)
	i, o := 0, 0
	for i < len(in) && o < len(out) {
		i2, o2 := i+1, o+1
		pi, po := int64(in[i]), int64(out[o])
		for pi != po {
			if pi < po && i2 < len(in) {
				pi *= int64(in[i2])
				i2++
			} else if o2 < len(out) {
				po *= int64(out[o2])
				o2++
			} else {
				break
			}
		}
		if i2-i == 1 || o2-o == 1 {
			l := b.label(min(in[i], out[o]), false)
			li[i], lo[o] = l, l
		}
		i, o = i2, o2
	}
	for k := range lo {
		if lo[k] < 0 {
			lo[k] = b.label(out[k], true)
		}
	}
	b.d.Operands, b.d.Result = [][]int{li}, lo
	return b.d
}

// dimsGather: the ids' dims lead the result, the table's trailing dims end it. The vocabulary
// dim is contracted: a shard of the table's rows looks up the ids it holds (at its offset)
// and gives zeros for the others, so the shards' results sum to the lookup (Megatron's
// vocab-parallel embedding; the row's Partial is a sum and codegen emits the mask).
func dimsGather(args []Type, _ Attrs, _ Type) Dims {
	var b dimsBuilder
	table, ids := args[0].Shape, args[1].Shape
	v := b.label(table[0], false)
	idl := b.labels(ids)
	rest := b.labels(table[1:])
	b.d.Operands = [][]int{append([]int{v}, rest...), idl}
	b.d.Result = append(append([]int(nil), idl...), rest...)
	return b.d
}

// dimsScatterAdd: the ids' dims are summed away, so splitting them leaves a partial result.
func dimsScatterAdd(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	ids := args[0].Shape
	idl := b.labels(ids)
	rows := b.label(res.Shape[0], true)
	rest := b.labels(res.Shape[1:])
	b.d.Operands = [][]int{idl, append(append([]int(nil), idl...), rest...)}
	b.d.Result = append([]int{rows}, rest...)
	return b.d
}

func dimsCrossEntropy(args []Type, _ Attrs, _ Type) Dims {
	var b dimsBuilder
	logits := b.labels(args[0].Shape)
	c := logits[len(logits)-1]
	b.d.Fixed[c] = true
	batch := logits[:len(logits)-1]
	b.d.Operands = [][]int{logits, batch}
	b.d.Result = batch
	return b.d
}

// convDims labels an NCHW tensor: n and c given, spatial dims fresh and fixed.
func (b *dimsBuilder) nchw(n, c int, s Shape) []int {
	return []int{n, c, b.label(s[2], true), b.label(s[3], true)}
}

func dimsConv(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	n, c, o := b.label(args[0].Shape[0], false), b.label(args[0].Shape[1], false), b.label(args[1].Shape[0], false)
	b.d.Operands = [][]int{b.nchw(n, c, args[0].Shape), b.nchw(o, c, args[1].Shape)}
	b.d.Result = b.nchw(n, o, res.Shape)
	return b.d
}

func dimsConvInputGrad(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	n, o, c := b.label(args[0].Shape[0], false), b.label(args[0].Shape[1], false), b.label(args[1].Shape[1], false)
	b.d.Operands = [][]int{b.nchw(n, o, args[0].Shape), b.nchw(o, c, args[1].Shape)}
	b.d.Result = b.nchw(n, c, res.Shape)
	return b.d
}

func dimsConvFilterGrad(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	n, c, o := b.label(args[0].Shape[0], false), b.label(args[0].Shape[1], false), b.label(args[1].Shape[1], false)
	b.d.Operands = [][]int{b.nchw(n, c, args[0].Shape), b.nchw(n, o, args[1].Shape)}
	b.d.Result = b.nchw(o, c, res.Shape)
	return b.d
}

// dimsPool: pooling and its gradients keep n and c, and fix the spatial dims.
func dimsPool(args []Type, _ Attrs, res Type) Dims {
	var b dimsBuilder
	n, c := b.label(res.Shape[0], false), b.label(res.Shape[1], false)
	for _, a := range args {
		b.d.Operands = append(b.d.Operands, b.nchw(n, c, a.Shape))
	}
	b.d.Result = b.nchw(n, c, res.Shape)
	return b.d
}
