package ir

// The op table: one row per op, holding every fact about the op that the compiler uses:
// its shape rule, dims signature and FLOPs, how its partial results combine (Partial),
// whether it is heavy and whether it follows its operand in the sharding ILP. The sharding
// pass, the layer clustering and codegen read these rows rather than lists of their own. A
// new op is its constant and its row here, its kernel (runtime/kernels, registered once by
// op) and, if differentiable, its gradient rule (passes); docs/DECISIONS.md counts the files.

// Op names one row of the op table.
type Op uint8

// The ops, one per row of opTable below (same order). The order is not part of any file
// format: the text form uses names.
const (
	OpInvalid Op = iota

	// Leaves.
	OpParam    // a trained parameter, declared with its type
	OpInput    // a data input, declared with its type and batch dim
	OpState    // optimizer state, declared with its type
	OpConstant // a tensor filled with one value
	OpIota     // index along one axis, for masks and one-hots

	// Elementwise, numpy broadcasting.
	OpAdd
	OpSub
	OpMul
	OpDiv
	OpMax
	OpEq
	OpNe
	OpLt
	OpLe
	OpGt
	OpGe
	OpWhere
	OpNeg
	OpExp
	OpLog
	OpTanh
	OpRelu
	OpGelu
	OpSigmoid
	OpSqrt
	OpRsqrt
	OpCast
	OpDropout

	// Contractions.
	OpMatMul
	OpEinsum

	// Reductions and row-wise ops.
	OpReduceSum
	OpReduceMax
	OpReduceMean
	OpSoftmax
	OpLogSoftmax
	OpCumsum
	OpLayerNorm
	OpBatchNorm

	// Layout.
	OpReshape
	OpTranspose
	OpBroadcast
	OpSlice
	OpConcat

	// Special.
	OpGather
	OpScatterAdd
	OpSparseCrossEntropy
	OpConv2D
	OpConv2DInputGrad
	OpConv2DFilterGrad
	OpMaxPool
	OpMaxPoolGrad
	OpAvgPool
	OpAvgPoolGrad

	numOps
)

var (
	stateAttrs = []AttrSpec{{Name: "type", Kind: AttrType}}
	// init says how the interpreter initializes a param: "normal" (scaled by fan-in),
	// "zeros" or "ones".
	paramAttrs = []AttrSpec{{Name: "type", Kind: AttrType}, {Name: "init", Kind: AttrString, Default: "normal"}}
	// batch marks the batch dim of a data input (-1: none); limit bounds generated integer
	// data to [0, limit) (labels, token ids), 0 meaning no bound is known.
	inputAttrs = []AttrSpec{{Name: "type", Kind: AttrType}, {Name: "batch", Kind: AttrInt, Default: -1}, {Name: "limit", Kind: AttrInt, Default: 0}}
	eps        = []AttrSpec{{Name: "eps", Kind: AttrFloat, Default: 1e-5}}
	// batch_norm's group: the rows of dim 0 one set of statistics runs over, in blocks of
	// consecutive rows (ghost batch norm; per micro-batch statistics); 0, the default, is
	// the whole dim 0.
	bnAttrs   = withAttrs(eps, AttrSpec{Name: "group", Kind: AttrInt, Default: 0})
	axisAttr  = []AttrSpec{{Name: "axis", Kind: AttrInt}}
	axesAttr  = []AttrSpec{{Name: "axes", Kind: AttrInts}}
	convAttrs = []AttrSpec{{Name: "stride", Kind: AttrInts, Default: []int{1, 1}}, {Name: "pad", Kind: AttrInts, Default: []int{0, 0}}}
	poolAttrs = []AttrSpec{{Name: "window", Kind: AttrInts}, {Name: "stride", Kind: AttrInts}, {Name: "pad", Kind: AttrInts, Default: []int{0, 0}}}
)

func withAttrs(base []AttrSpec, more ...AttrSpec) []AttrSpec {
	return append(append([]AttrSpec(nil), base...), more...)
}

// Row constructors for the op families.

func leaf(name string, attrs []AttrSpec) OpDef {
	return OpDef{Name: name, Category: CatLeaf, Attrs: attrs, Infer: inferLeaf, Dims: dimsFresh, FLOPs: noFLOPs}
}

func arith(name string) OpDef {
	return OpDef{Name: name, Category: CatElementwise, Arity: 2, Infer: inferArith(name), Dims: dimsBroadcasting, FLOPs: perResult(1), Follower: true}
}

func compare(name string) OpDef {
	return OpDef{Name: name, Category: CatElementwise, Arity: 2, Infer: inferCompare(name), Dims: dimsBroadcasting, FLOPs: perResult(1), Follower: true}
}

func unary(name string, flops float64) OpDef {
	return OpDef{Name: name, Category: CatElementwise, Arity: 1, Infer: inferUnaryFloat(name), Dims: dimsBroadcasting, FLOPs: perResult(flops), Follower: true}
}

func reduce(name string, floatOnly bool, partial Partial) OpDef {
	return OpDef{Name: name, Category: CatReduce, Arity: 1, Attrs: axesAttr, Infer: inferReduce(name, floatOnly), Dims: dimsReduce, FLOPs: perOperand(1),
		Partial: partial, Follower: true}
}

func alongAxis(name string, flops float64) OpDef {
	return OpDef{Name: name, Category: CatReduce, Arity: 1, Attrs: axisAttr, Infer: inferAlongAxis(name), Dims: dimsAlongAxis, FLOPs: perResult(flops), Follower: true}
}

func pool(name string) OpDef {
	return OpDef{Name: name, Category: CatSpecial, Arity: 1, Attrs: poolAttrs, Infer: inferPool(name), Dims: dimsPool, FLOPs: poolFLOPs}
}

var opTable = [numOps]OpDef{
	OpParam:    leaf("param", paramAttrs),
	OpInput:    leaf("input", inputAttrs),
	OpState:    leaf("state", stateAttrs),
	OpConstant: {Name: "constant", Category: CatLeaf, Attrs: []AttrSpec{{Name: "value", Kind: AttrFloat}, {Name: "type", Kind: AttrType}}, Infer: inferConstant, Dims: dimsFresh, FLOPs: noFLOPs},
	OpIota:     {Name: "iota", Category: CatLeaf, Attrs: []AttrSpec{{Name: "axis", Kind: AttrInt}, {Name: "type", Kind: AttrType}}, Infer: inferIota, Dims: dimsIota, FLOPs: noFLOPs},

	OpAdd:     arith("add"),
	OpSub:     arith("sub"),
	OpMul:     arith("mul"),
	OpDiv:     arith("div"),
	OpMax:     arith("max"),
	OpEq:      compare("eq"),
	OpNe:      compare("ne"),
	OpLt:      compare("lt"),
	OpLe:      compare("le"),
	OpGt:      compare("gt"),
	OpGe:      compare("ge"),
	OpWhere:   {Name: "where", Category: CatElementwise, Arity: 3, Infer: inferWhere, Dims: dimsBroadcasting, FLOPs: perResult(1), Follower: true},
	OpNeg:     {Name: "neg", Category: CatElementwise, Arity: 1, Infer: inferNeg, Dims: dimsBroadcasting, FLOPs: perResult(1), Follower: true},
	OpExp:     unary("exp", 4),
	OpLog:     unary("log", 4),
	OpTanh:    unary("tanh", 6),
	OpRelu:    unary("relu", 1),
	OpGelu:    unary("gelu", 10),
	OpSigmoid: unary("sigmoid", 5),
	OpSqrt:    unary("sqrt", 2),
	OpRsqrt:   unary("rsqrt", 2),
	OpCast:    {Name: "cast", Category: CatElementwise, Arity: 1, Attrs: []AttrSpec{{Name: "to", Kind: AttrDType}}, Infer: inferCast, Dims: dimsBroadcasting, FLOPs: noFLOPs, Follower: true},
	OpDropout: {Name: "dropout", Category: CatElementwise, Arity: 1, Attrs: []AttrSpec{{Name: "rate", Kind: AttrFloat}, {Name: "seed", Kind: AttrInt}}, Infer: inferDropout, Dims: dimsDropout, FLOPs: perResult(2), Follower: true},

	OpMatMul: {Name: "matmul", Category: CatContraction, Arity: 2, Infer: inferMatMul, Dims: dimsMatMul, FLOPs: contractionFLOPs(dimsMatMul), Partial: PartialSum, Heavy: true},
	OpEinsum: {Name: "einsum", Category: CatContraction, Arity: 1, Variadic: true, Attrs: []AttrSpec{{Name: "spec", Kind: AttrString}}, Infer: inferEinsum, Dims: dimsEinsum, FLOPs: contractionFLOPs(dimsEinsum), Partial: PartialSum, Heavy: true},

	OpReduceSum:  reduce("reduce_sum", false, PartialSum),
	OpReduceMax:  reduce("reduce_max", false, PartialMax),
	OpReduceMean: reduce("reduce_mean", true, PartialSum),
	OpSoftmax:    alongAxis("softmax", 5),
	OpLogSoftmax: alongAxis("log_softmax", 5),
	OpCumsum:     alongAxis("cumsum", 1),
	OpLayerNorm:  {Name: "layer_norm", Category: CatReduce, Arity: 3, Attrs: eps, Infer: inferNorm("layer_norm", layerNormChannel), Dims: dimsNorm(layerNormChannel, false), FLOPs: perResult(8), Follower: true},
	OpBatchNorm:  {Name: "batch_norm", Category: CatReduce, Arity: 3, Attrs: bnAttrs, Infer: inferNorm("batch_norm", batchNormChannel), Dims: dimsBatchNorm, FLOPs: perResult(8), Follower: true, SyncStats: 2},

	OpReshape:   {Name: "reshape", Category: CatLayout, Arity: 1, Attrs: []AttrSpec{{Name: "shape", Kind: AttrInts}}, Infer: inferReshape, Dims: dimsReshape, FLOPs: noFLOPs, Follower: true},
	OpTranspose: {Name: "transpose", Category: CatLayout, Arity: 1, Attrs: []AttrSpec{{Name: "perm", Kind: AttrInts}}, Infer: inferTranspose, Dims: dimsTranspose, FLOPs: noFLOPs, Follower: true},
	OpBroadcast: {Name: "broadcast", Category: CatLayout, Arity: 1, Attrs: []AttrSpec{{Name: "dims", Kind: AttrInts}, {Name: "shape", Kind: AttrInts}}, Infer: inferBroadcast, Dims: dimsBroadcast, FLOPs: noFLOPs, Follower: true},
	OpSlice:     {Name: "slice", Category: CatLayout, Arity: 1, Attrs: []AttrSpec{{Name: "limit", Kind: AttrInts}, {Name: "start", Kind: AttrInts}}, Infer: inferSlice, Dims: dimsSlice, FLOPs: noFLOPs},
	OpConcat:    {Name: "concat", Category: CatLayout, Arity: 1, Variadic: true, Attrs: axisAttr, Infer: inferConcat, Dims: dimsConcat, FLOPs: noFLOPs},

	OpGather:             {Name: "gather", Category: CatSpecial, Arity: 2, Infer: inferGather, Dims: dimsGather, FLOPs: perResult(1), Partial: PartialSum},
	OpScatterAdd:         {Name: "scatter_add", Category: CatSpecial, Arity: 2, Attrs: []AttrSpec{{Name: "rows", Kind: AttrInt}}, Infer: inferScatterAdd, Dims: dimsScatterAdd, FLOPs: perOperandN(1, 1), Partial: PartialSum},
	OpSparseCrossEntropy: {Name: "sparse_cross_entropy", Category: CatSpecial, Arity: 2, Infer: inferCrossEntropy, Dims: dimsCrossEntropy, FLOPs: perOperand(5)},
	OpConv2D:             {Name: "conv2d", Category: CatSpecial, Arity: 2, Attrs: convAttrs, Infer: inferConv, Dims: dimsConv, FLOPs: convFLOPs, Partial: PartialSum, Heavy: true},
	OpConv2DInputGrad:    {Name: "conv2d_input_grad", Category: CatSpecial, Arity: 2, Attrs: withAttrs(convAttrs, AttrSpec{Name: "shape", Kind: AttrInts}), Infer: inferConvInputGrad, Dims: dimsConvInputGrad, FLOPs: convInputGradFLOPs, Partial: PartialSum, Heavy: true},
	OpConv2DFilterGrad:   {Name: "conv2d_filter_grad", Category: CatSpecial, Arity: 2, Attrs: withAttrs(convAttrs, AttrSpec{Name: "kernel", Kind: AttrInts}), Infer: inferConvFilterGrad, Dims: dimsConvFilterGrad, FLOPs: convFilterGradFLOPs, Partial: PartialSum, Heavy: true},
	OpMaxPool:            pool("max_pool"),
	OpMaxPoolGrad:        {Name: "max_pool_grad", Category: CatSpecial, Arity: 2, Attrs: poolAttrs, Infer: inferMaxPoolGrad, Dims: dimsPool, FLOPs: poolFLOPs},
	OpAvgPool:            pool("avg_pool"),
	OpAvgPoolGrad:        {Name: "avg_pool_grad", Category: CatSpecial, Arity: 1, Attrs: withAttrs(poolAttrs, AttrSpec{Name: "shape", Kind: AttrInts}), Infer: inferAvgPoolGrad, Dims: dimsPool, FLOPs: poolFLOPs},
}
