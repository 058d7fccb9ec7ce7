package onnx

import (
	"fmt"
	"math"
	"slices"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// lowerings maps each ONNX op type the importer covers to its lowering onto the IR's op
// table. The list is what torch.onnx.export writes at opsets 13 to 17 for MLPs, GPT-style
// transformers, small CNNs and MoE gates; see the package comment.
var lowerings map[string]lowerFn

func init() {
	lowerings = map[string]lowerFn{
		"Add": binaryOp(ir.OpAdd), "Sub": binaryOp(ir.OpSub), "Mul": binaryOp(ir.OpMul), "Div": binaryOp(ir.OpDiv),
		"Max": binaryOp(ir.OpMax), "Equal": binaryOp(ir.OpEq), "Less": binaryOp(ir.OpLt), "LessOrEqual": binaryOp(ir.OpLe),
		"Greater": binaryOp(ir.OpGt), "GreaterOrEqual": binaryOp(ir.OpGe),
		"Relu": unary(ir.OpRelu), "Tanh": unary(ir.OpTanh), "Sigmoid": unary(ir.OpSigmoid), "Exp": unary(ir.OpExp),
		"Log": unary(ir.OpLog), "Sqrt": unary(ir.OpSqrt), "Neg": unary(ir.OpNeg), "Gelu": lowerGelu,
		"Where": lowerWhere, "Not": lowerNot, "Pow": lowerPow, "Reciprocal": lowerReciprocal, "Cast": lowerCast,
		"Identity": lowerIdentity, "Dropout": lowerDropout,
		"MatMul": lowerMatMul, "Gemm": lowerGemm, "Einsum": lowerEinsum,
		"Softmax": alongAxis(ir.OpSoftmax), "LogSoftmax": alongAxis(ir.OpLogSoftmax),
		"ReduceSum": reduce(ir.OpReduceSum), "ReduceMean": reduce(ir.OpReduceMean), "ReduceMax": reduce(ir.OpReduceMax),
		"Reshape": lowerReshape, "Flatten": lowerFlatten, "Transpose": lowerTranspose, "Unsqueeze": lowerUnsqueeze,
		"Squeeze": lowerSqueeze, "Concat": lowerConcat, "Slice": lowerSlice, "Split": lowerSplit, "Gather": lowerGather,
		"Expand": lowerExpand, "Pad": lowerPad,
		"Shape": lowerShape, "Size": lowerSize, "Constant": lowerConstant, "ConstantOfShape": lowerConstantOfShape,
		"Range":              lowerRange,
		"LayerNormalization": lowerLayerNorm, "BatchNormalization": lowerBatchNorm,
		"Conv": lowerConv, "MaxPool": pool(ir.OpMaxPool), "AveragePool": pool(ir.OpAvgPool),
		"GlobalAveragePool": globalPool(ir.OpReduceMean), "GlobalMaxPool": globalPool(ir.OpReduceMax),
		"SoftmaxCrossEntropyLoss": lowerSoftmaxCrossEntropy,
	}
	for _, op := range []string{"Add", "Sub", "Mul", "Div", "Max", "Equal", "Less", "LessOrEqual", "Greater",
		"GreaterOrEqual", "Where", "Not", "Neg", "Cast", "Identity", "Reshape", "Flatten", "Transpose",
		"Unsqueeze", "Squeeze", "Concat", "Slice", "Split", "Gather", "Expand", "ReduceSum", "ReduceMax"} {
		foldable[op] = true
	}
}

func binaryOp(op ir.Op) lowerFn {
	return func(n *node) error {
		args, err := n.elementwiseArgs(2)
		if err != nil {
			return err
		}
		id, err := n.emit(op, "", args, nil)
		n.set(0, id)
		return err
	}
}

func unary(op ir.Op) lowerFn {
	return func(n *node) error {
		x, err := n.rt(0)
		if err != nil {
			return err
		}
		id, err := n.emit(op, "", []ir.ValueID{x}, nil)
		n.set(0, id)
		return err
	}
}

func lowerGelu(n *node) error {
	if a := n.attrString("approximate", "none"); a != "none" {
		return fmt.Errorf("approximate=%q is not supported: the IR's gelu is the exact erf form", a)
	}
	return unary(ir.OpGelu)(n)
}

func lowerWhere(n *node) error {
	args, err := n.elementwiseArgs(3)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpWhere, "", args, nil)
	n.set(0, id)
	return err
}

func lowerNot(n *node) error {
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	f, err := n.im.scalar(n.outName(0)+".false", 0, ir.Bool, nil)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpEq, "", []ir.ValueID{x, f}, nil)
	n.set(0, id)
	return err
}

// lowerPow takes the exponents that appear in exported models: 2 (variance), 0.5 and -0.5
// (norms), 1, 3 and -1.
func lowerPow(n *node) error {
	e, err := n.known(1, "exponent")
	if err != nil {
		return err
	}
	p, ok := uniform(e)
	if !ok {
		return fmt.Errorf("the exponent must be one number, is %s", e.Type)
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	xt := n.im.g.Value(x).Type
	var id ir.ValueID
	switch p {
	case 1:
		id = x
	case 2:
		id, err = n.emit(ir.OpMul, "", []ir.ValueID{x, x}, nil)
	case 3:
		var sq ir.ValueID
		if sq, err = n.emit(ir.OpMul, "sq", []ir.ValueID{x, x}, nil); err == nil {
			id, err = n.emit(ir.OpMul, "", []ir.ValueID{sq, x}, nil)
		}
	case 0.5:
		id, err = n.emit(ir.OpSqrt, "", []ir.ValueID{x}, nil)
	case -0.5:
		id, err = n.emit(ir.OpRsqrt, "", []ir.ValueID{x}, nil)
	case -1:
		var one ir.ValueID
		if one, err = n.im.scalar(n.outName(0)+".one", 1, xt.DType, nil); err == nil {
			id, err = n.emit(ir.OpDiv, "", []ir.ValueID{one, x}, nil)
		}
	default:
		return fmt.Errorf("exponent %g is not supported (1, 2, 3, 0.5, -0.5 and -1 are)", p)
	}
	n.set(0, id)
	return err
}

func lowerReciprocal(n *node) error {
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	one, err := n.im.scalar(n.outName(0)+".one", 1, n.im.g.Value(x).Type.DType, nil)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpDiv, "", []ir.ValueID{one, x}, nil)
	n.set(0, id)
	return err
}

func lowerCast(n *node) error {
	to, ok := dtypeOf(int32(n.attrInt("to", 0)))
	if !ok {
		return fmt.Errorf("cast to %s: autopar has no such type", dtypeName(int32(n.attrInt("to", 0))))
	}
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	if t.DType == to {
		return n.alias(0, 0)
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpCast, "", []ir.ValueID{x}, ir.Attrs{}.With("to", to))
	n.set(0, id)
	return err
}

// lowerIdentity aliases its input, except that the identity of a float initializer is a
// param of its own: torch.onnx.export stores equal initial weights (every LayerNorm's ones)
// once and names the others as identities of it, which must not tie them in training.
func lowerIdentity(n *node) error {
	v := n.in(0)
	if v == nil {
		return fmt.Errorf("input 0 is missing")
	}
	if v.param {
		o := n.p.GetOutput()[0]
		n.im.vals[o] = &val{id: ir.NoValue, c: v.c.Clone(), param: true, onnx: o}
		return nil
	}
	return n.alias(0, 0)
}

// lowerDropout is the identity in inference (no training_mode input, or false, or a zero
// ratio) and the IR's dropout otherwise.
func lowerDropout(n *node) error {
	ratio := 0.5
	if n.in(1) != nil {
		r, err := n.known(1, "ratio")
		if err != nil {
			return err
		}
		ratio = r.At(0)
	}
	training := false
	if n.in(2) != nil {
		tm, err := n.known(2, "training_mode")
		if err != nil {
			return err
		}
		training = tm.At(0) != 0
	}
	if !training || ratio == 0 {
		return n.alias(0, 0)
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpDropout, "", []ir.ValueID{x}, ir.Attrs{}.With("rate", ratio).With("seed", int(x)))
	n.set(0, id)
	return err
}

func alongAxis(op ir.Op) lowerFn {
	return func(n *node) error {
		x, err := n.rt(0)
		if err != nil {
			return err
		}
		ax, err := axis(n.attrInt("axis", -1), n.im.g.Value(x).Type.Shape.Rank())
		if err != nil {
			return err
		}
		id, err := n.emit(op, "", []ir.ValueID{x}, ir.Attrs{}.With("axis", ax))
		n.set(0, id)
		return err
	}
}

// reduce reads the axes from the attribute (ReduceMean and ReduceMax before opset 18) or
// the second input (ReduceSum from opset 13, all from 18), and keeps the reduced dims as 1s
// unless keepdims=0.
func reduce(op ir.Op) lowerFn {
	return func(n *node) error {
		x, err := n.rt(0)
		if err != nil {
			return err
		}
		s := n.im.g.Value(x).Type.Shape
		axes, ok := n.attrInts("axes")
		if n.in(1) != nil {
			if axes, err = n.ints(1, "axes"); err != nil {
				return err
			}
			ok = true
		}
		if !ok || len(axes) == 0 {
			if n.attrInt("noop_with_empty_axes", 0) != 0 {
				return n.alias(0, 0)
			}
			axes = allAxes(len(s))
		}
		norm := make([]int, 0, len(axes))
		for _, a := range axes {
			a, err := axis(a, len(s))
			if err != nil {
				return err
			}
			if !slices.Contains(norm, a) {
				norm = append(norm, a)
			}
		}
		slices.Sort(norm)
		if len(s) == 0 {
			return n.alias(0, 0)
		}
		suffix := ""
		if n.attrInt("keepdims", 1) != 0 {
			suffix = "reduced"
		}
		id, err := n.emit(op, suffix, []ir.ValueID{x}, ir.Attrs{}.With("axes", norm))
		if err != nil || suffix == "" {
			n.set(0, id)
			return err
		}
		kept := s.Clone()
		for _, a := range norm {
			kept[a] = 1
		}
		id, err = n.emit(ir.OpReshape, "", []ir.ValueID{id}, ir.Attrs{}.With("shape", []int(kept)))
		n.set(0, id)
		return err
	}
}

func lowerShape(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	r := t.Shape.Rank()
	start, end := n.attrInt("start", 0), n.attrInt("end", r)
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = max(0, min(start, r)), max(0, min(end, r))
	if end <= start {
		return fmt.Errorf("start %d and end %d select no dims of rank %d", start, end, r)
	}
	out := kernels.New(ir.Type{DType: ir.I64, Shape: ir.Shape{end - start}})
	for i := start; i < end; i++ {
		out.Int[i-start] = int64(t.Shape[i])
	}
	n.setKnown(0, out)
	return nil
}

func lowerSize(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	out := kernels.New(ir.Type{DType: ir.I64})
	out.Int[0] = t.Shape.NumElements()
	n.setKnown(0, out)
	return nil
}

func lowerConstant(n *node) error {
	for _, a := range n.p.GetAttribute() {
		var t *kernels.Tensor
		var err error
		switch a.GetName() {
		case "value":
			t, err = tensorOf(a.GetT())
		case "value_float":
			t = kernels.FromF64(ir.F32, nil, []float64{float64(a.GetF())})
		case "value_floats":
			t = kernels.New(ir.Type{DType: ir.F32, Shape: ir.Shape{len(a.GetFloats())}})
			for i, f := range a.GetFloats() {
				t.Set(i, float64(f))
			}
		case "value_int":
			t = kernels.New(ir.Type{DType: ir.I64})
			t.Int[0] = a.GetI()
		case "value_ints":
			t = kernels.New(ir.Type{DType: ir.I64, Shape: ir.Shape{len(a.GetInts())}})
			copy(t.Int, a.GetInts())
		default:
			return fmt.Errorf("attribute %s is not supported (value, value_float(s) and value_int(s) are)", a.GetName())
		}
		if err != nil {
			return err
		}
		if t.Len() == 0 {
			return fmt.Errorf("the constant is empty")
		}
		n.setKnown(0, t)
		return nil
	}
	return fmt.Errorf("it has no value")
}

func lowerConstantOfShape(n *node) error {
	shape, err := n.ints(0, "shape")
	if err != nil {
		return err
	}
	fill := kernels.FromF64(ir.F32, nil, []float64{0})
	if a := n.attr("value"); a != nil {
		if fill, err = tensorOf(a.GetT()); err != nil {
			return err
		}
	}
	s, err := checkShape(shape, maxBuilt)
	if err != nil {
		return err
	}
	t := kernels.New(ir.Type{DType: fill.Type.DType, Shape: s})
	for i := range t.Len() {
		t.Set(i, fill.At(0))
	}
	n.setKnown(0, t)
	return nil
}

// checkShape wants positive dims and at most limit elements.
func checkShape(shape []int, limit int64) (ir.Shape, error) {
	n := int64(1)
	for _, d := range shape {
		if d <= 0 || n*int64(d) > limit {
			return nil, fmt.Errorf("shape %v is empty, negative or too large", shape)
		}
		n *= int64(d)
	}
	return ir.Shape(shape), nil
}

func lowerRange(n *node) error {
	var v [3]*kernels.Tensor
	for i, what := range []string{"start", "limit", "delta"} {
		t, err := n.known(i, what)
		if err != nil {
			return err
		}
		v[i] = t
	}
	start, limit, delta := v[0].At(0), v[1].At(0), v[2].At(0)
	if delta == 0 {
		return fmt.Errorf("delta is zero")
	}
	count := math.Ceil((limit - start) / delta)
	if !(count >= 1 && count <= maxBuilt) {
		return fmt.Errorf("the range [%g, %g) by %g is empty or too large", start, limit, delta)
	}
	t := kernels.New(ir.Type{DType: v[0].Type.DType, Shape: ir.Shape{int(count)}})
	for i := range t.Len() {
		t.Set(i, start+float64(i)*delta)
	}
	n.setKnown(0, t)
	return nil
}

func lowerSoftmaxCrossEntropy(n *node) error {
	if n.in(2) != nil {
		return fmt.Errorf("class weights are not supported")
	}
	scores, err := n.rt(0)
	if err != nil {
		return err
	}
	labels, err := n.rt(1)
	if err != nil {
		return err
	}
	st := n.im.g.Value(scores).Type
	if st.Shape.Rank() < 2 {
		return fmt.Errorf("scores must be [N, C, ...], are %s", st)
	}
	classes := st.Shape[1]
	if r := st.Shape.Rank(); r > 2 { // [N, C, d...] -> [N, d..., C]
		perm := append([]int{0}, allAxes(r)[2:]...)
		if scores, err = n.emit(ir.OpTranspose, "scores", []ir.ValueID{scores}, ir.Attrs{}.With("perm", append(perm, 1))); err != nil {
			return err
		}
	}
	n.im.limit(n.im.rootInput(labels), classes)
	ce, err := n.emit(ir.OpSparseCrossEntropy, "per_example", []ir.ValueID{scores, labels}, nil)
	if err != nil {
		return err
	}
	rank := n.im.g.Value(ce).Type.Shape.Rank()
	var id ir.ValueID
	switch r := n.attrString("reduction", "mean"); r {
	case "none":
		id = ce
	case "mean":
		id, err = n.emit(ir.OpReduceMean, "", []ir.ValueID{ce}, ir.Attrs{}.With("axes", allAxes(rank)))
	case "sum":
		id, err = n.emit(ir.OpReduceSum, "", []ir.ValueID{ce}, ir.Attrs{}.With("axes", allAxes(rank)))
	default:
		return fmt.Errorf("reduction %q is not known", r)
	}
	n.set(0, id)
	return err
}

// rootInput follows layout ops and casts back to a data input, or returns NoValue... the
// value itself when there is none (limit ignores non-inputs).
func (im *importer) rootInput(id ir.ValueID) ir.ValueID {
	for {
		v := im.g.Value(id)
		switch v.Op {
		case ir.OpReshape, ir.OpTranspose, ir.OpCast, ir.OpSlice, ir.OpBroadcast:
			id = v.Args[0]
		default:
			return id
		}
	}
}
