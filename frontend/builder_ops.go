package frontend

import "github.com/autopar/autopar/ir"

// One method per non-leaf row of the op table. Each is a thin call to Apply: the shape rule
// and the attribute checks live in the table, so the builder cannot drift from the parser.
// Attribute slices are copied into the graph; callers may reuse them.

// Elementwise, numpy broadcasting.

// Add returns x + y.
func (b *Builder) Add(x, y Value) Value { return b.Apply(ir.OpAdd, nil, x, y) }

// Sub returns x - y.
func (b *Builder) Sub(x, y Value) Value { return b.Apply(ir.OpSub, nil, x, y) }

// Mul returns x * y.
func (b *Builder) Mul(x, y Value) Value { return b.Apply(ir.OpMul, nil, x, y) }

// Div returns x / y.
func (b *Builder) Div(x, y Value) Value { return b.Apply(ir.OpDiv, nil, x, y) }

// Max returns the elementwise maximum of x and y.
func (b *Builder) Max(x, y Value) Value { return b.Apply(ir.OpMax, nil, x, y) }

// Eq returns the bool tensor x == y.
func (b *Builder) Eq(x, y Value) Value { return b.Apply(ir.OpEq, nil, x, y) }

// Ne returns the bool tensor x != y.
func (b *Builder) Ne(x, y Value) Value { return b.Apply(ir.OpNe, nil, x, y) }

// Lt returns the bool tensor x < y.
func (b *Builder) Lt(x, y Value) Value { return b.Apply(ir.OpLt, nil, x, y) }

// Le returns the bool tensor x <= y.
func (b *Builder) Le(x, y Value) Value { return b.Apply(ir.OpLe, nil, x, y) }

// Gt returns the bool tensor x > y.
func (b *Builder) Gt(x, y Value) Value { return b.Apply(ir.OpGt, nil, x, y) }

// Ge returns the bool tensor x >= y.
func (b *Builder) Ge(x, y Value) Value { return b.Apply(ir.OpGe, nil, x, y) }

// Where returns x where cond holds, else y.
func (b *Builder) Where(cond, x, y Value) Value { return b.Apply(ir.OpWhere, nil, cond, x, y) }

// Neg returns -x.
func (b *Builder) Neg(x Value) Value { return b.Apply(ir.OpNeg, nil, x) }

// Exp returns e^x.
func (b *Builder) Exp(x Value) Value { return b.Apply(ir.OpExp, nil, x) }

// Log returns the natural logarithm of x.
func (b *Builder) Log(x Value) Value { return b.Apply(ir.OpLog, nil, x) }

// Tanh returns tanh(x).
func (b *Builder) Tanh(x Value) Value { return b.Apply(ir.OpTanh, nil, x) }

// Relu returns max(x, 0).
func (b *Builder) Relu(x Value) Value { return b.Apply(ir.OpRelu, nil, x) }

// Gelu returns the GELU activation of x.
func (b *Builder) Gelu(x Value) Value { return b.Apply(ir.OpGelu, nil, x) }

// Sigmoid returns 1 / (1 + e^-x).
func (b *Builder) Sigmoid(x Value) Value { return b.Apply(ir.OpSigmoid, nil, x) }

// Sqrt returns the square root of x.
func (b *Builder) Sqrt(x Value) Value { return b.Apply(ir.OpSqrt, nil, x) }

// Rsqrt returns 1 / sqrt(x).
func (b *Builder) Rsqrt(x Value) Value { return b.Apply(ir.OpRsqrt, nil, x) }

// Cast converts x to dtype to.
func (b *Builder) Cast(x Value, to ir.DType) Value {
	return b.Apply(ir.OpCast, ir.Attrs{}.With("to", to), x)
}

// Dropout zeroes each element of x with probability rate and scales the rest by
// 1/(1-rate); seed makes the mask reproducible.
func (b *Builder) Dropout(x Value, rate float64, seed int) Value {
	return b.Apply(ir.OpDropout, ir.Attrs{}.With("rate", rate).With("seed", seed), x)
}

// Contractions.

// MatMul multiplies two matrices: [m,k] x [k,n] -> [m,n].
func (b *Builder) MatMul(x, w Value) Value { return b.Apply(ir.OpMatMul, nil, x, w) }

// Einsum contracts xs by spec ("bsh,hk->bsk"): lowercase labels, one string per operand.
func (b *Builder) Einsum(spec string, xs ...Value) Value {
	return b.Apply(ir.OpEinsum, ir.Attrs{}.With("spec", spec), xs...)
}

// Reductions and row-wise ops.

// ReduceSum sums x over axes (strictly increasing), removing them.
func (b *Builder) ReduceSum(x Value, axes ...int) Value {
	return b.Apply(ir.OpReduceSum, ir.Attrs{}.With("axes", axes), x)
}

// ReduceMax takes the maximum of x over axes, removing them.
func (b *Builder) ReduceMax(x Value, axes ...int) Value {
	return b.Apply(ir.OpReduceMax, ir.Attrs{}.With("axes", axes), x)
}

// ReduceMean averages x over axes, removing them.
func (b *Builder) ReduceMean(x Value, axes ...int) Value {
	return b.Apply(ir.OpReduceMean, ir.Attrs{}.With("axes", axes), x)
}

// Softmax normalizes x along axis.
func (b *Builder) Softmax(x Value, axis int) Value {
	return b.Apply(ir.OpSoftmax, ir.Attrs{}.With("axis", axis), x)
}

// LogSoftmax returns log(softmax(x)) along axis, computed stably.
func (b *Builder) LogSoftmax(x Value, axis int) Value {
	return b.Apply(ir.OpLogSoftmax, ir.Attrs{}.With("axis", axis), x)
}

// Cumsum returns the inclusive running sum of x along axis.
func (b *Builder) Cumsum(x Value, axis int) Value {
	return b.Apply(ir.OpCumsum, ir.Attrs{}.With("axis", axis), x)
}

// LayerNorm normalizes x over its last dim, then scales by gamma and shifts by beta.
func (b *Builder) LayerNorm(x, gamma, beta Value, eps float64) Value {
	return b.Apply(ir.OpLayerNorm, ir.Attrs{}.With("eps", eps), x, gamma, beta)
}

// BatchNorm normalizes x (NC or NCHW) per channel over all other dims with the batch's
// statistics (training mode), then scales by gamma and shifts by beta.
func (b *Builder) BatchNorm(x, gamma, beta Value, eps float64) Value {
	return b.Apply(ir.OpBatchNorm, ir.Attrs{}.With("eps", eps), x, gamma, beta)
}

// Layout.

// Reshape gives x a new shape with the same number of elements, row-major.
func (b *Builder) Reshape(x Value, shape ir.Shape) Value {
	return b.Apply(ir.OpReshape, ir.Attrs{}.With("shape", shape), x)
}

// Transpose permutes the dims of x: result dim i is x's dim perm[i].
func (b *Builder) Transpose(x Value, perm ...int) Value {
	return b.Apply(ir.OpTranspose, ir.Attrs{}.With("perm", perm), x)
}

// Broadcast stretches x to shape; dims[i] is the result dim that x's dim i maps to.
func (b *Builder) Broadcast(x Value, dims []int, shape ir.Shape) Value {
	return b.Apply(ir.OpBroadcast, ir.Attrs{}.With("dims", dims).With("shape", shape), x)
}

// Slice cuts x to [start[i], limit[i]) along every dim i.
func (b *Builder) Slice(x Value, start, limit []int) Value {
	return b.Apply(ir.OpSlice, ir.Attrs{}.With("start", start).With("limit", limit), x)
}

// Concat joins xs along axis.
func (b *Builder) Concat(axis int, xs ...Value) Value {
	return b.Apply(ir.OpConcat, ir.Attrs{}.With("axis", axis), xs...)
}

// Special.

// Gather looks up rows of table [V, D...] at integer ids [B...], giving [B..., D...].
func (b *Builder) Gather(table, ids Value) Value { return b.Apply(ir.OpGather, nil, table, ids) }

// ScatterAdd sums updates [B..., D...] into a zero tensor [rows, D...] at ids [B...]:
// gather's gradient.
func (b *Builder) ScatterAdd(ids, updates Value, rows int) Value {
	return b.Apply(ir.OpScatterAdd, ir.Attrs{}.With("rows", rows), ids, updates)
}

// SparseCrossEntropy returns the per-example loss -log softmax(logits)[label] of logits
// [B..., C] against integer labels [B...].
func (b *Builder) SparseCrossEntropy(logits, labels Value) Value {
	return b.Apply(ir.OpSparseCrossEntropy, nil, logits, labels)
}

func convAttrs(stride, pad []int) ir.Attrs {
	return ir.Attrs{}.With("stride", stride).With("pad", pad)
}

// Conv2D convolves x [N,C,H,W] with filter [O,C,KH,KW] (NCHW, no bias).
func (b *Builder) Conv2D(x, filter Value, stride, pad []int) Value {
	return b.Apply(ir.OpConv2D, convAttrs(stride, pad), x, filter)
}

// Conv2DInputGrad is the gradient of Conv2D with respect to its input of the given shape.
func (b *Builder) Conv2DInputGrad(dy, filter Value, stride, pad []int, shape ir.Shape) Value {
	return b.Apply(ir.OpConv2DInputGrad, convAttrs(stride, pad).With("shape", shape), dy, filter)
}

// Conv2DFilterGrad is the gradient of Conv2D with respect to its filter of the given
// kernel size (KH, KW).
func (b *Builder) Conv2DFilterGrad(x, dy Value, stride, pad, kernel []int) Value {
	return b.Apply(ir.OpConv2DFilterGrad, convAttrs(stride, pad).With("kernel", kernel), x, dy)
}

func poolAttrs(window, stride, pad []int) ir.Attrs {
	return ir.Attrs{}.With("window", window).With("stride", stride).With("pad", pad)
}

// MaxPool takes the maximum over each window of x [N,C,H,W].
func (b *Builder) MaxPool(x Value, window, stride, pad []int) Value {
	return b.Apply(ir.OpMaxPool, poolAttrs(window, stride, pad), x)
}

// MaxPoolGrad routes dy back to the maximum of each window of x.
func (b *Builder) MaxPoolGrad(x, dy Value, window, stride, pad []int) Value {
	return b.Apply(ir.OpMaxPoolGrad, poolAttrs(window, stride, pad), x, dy)
}

// AvgPool averages each window of x [N,C,H,W].
func (b *Builder) AvgPool(x Value, window, stride, pad []int) Value {
	return b.Apply(ir.OpAvgPool, poolAttrs(window, stride, pad), x)
}

// AvgPoolGrad spreads dy evenly back over the windows of an input of the given shape.
func (b *Builder) AvgPoolGrad(dy Value, window, stride, pad []int, shape ir.Shape) Value {
	return b.Apply(ir.OpAvgPoolGrad, poolAttrs(window, stride, pad).With("shape", shape), dy)
}
