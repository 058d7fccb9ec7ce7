package ir

// Shape rules of gather, cross-entropy, convolution, pooling and their gradients.

// inferGather is an embedding lookup: table [V, D...] indexed by ids [B...] gives [B..., D...].
func inferGather(args []Arg, _ Attrs) (Type, error) {
	table, ids := args[0], args[1]
	if table.Type.Shape.Rank() < 1 {
		return Type{}, errf("gather", "table %s must have at least one dim, is %s", table.Name, table.Type)
	}
	if err := wantInt("gather", ids); err != nil {
		return Type{}, err
	}
	out := append(ids.Type.Shape.Clone(), table.Type.Shape[1:]...)
	return Type{table.Type.DType, out}, nil
}

// inferScatterAdd is gather's gradient: updates [B..., D...] summed into rows [rows, D...]
// at ids [B...].
func inferScatterAdd(args []Arg, at Attrs) (Type, error) {
	ids, upd := args[0], args[1]
	if err := wantInt("scatter_add", ids); err != nil {
		return Type{}, err
	}
	rows, ni := at.Int("rows"), ids.Type.Shape.Rank()
	if rows <= 0 {
		return Type{}, errf("scatter_add", "rows must be positive, got %d", rows)
	}
	if upd.Type.Shape.Rank() < ni || !upd.Type.Shape[:ni].Equal(ids.Type.Shape) {
		return Type{}, errf("scatter_add", "updates %s of type %s must start with the shape of ids %s of type %s", upd.Name, upd.Type, ids.Name, ids.Type)
	}
	out := append(Shape{rows}, upd.Type.Shape[ni:]...)
	return Type{upd.Type.DType, out}, nil
}

// inferCrossEntropy takes logits [B..., C] and integer labels [B...] to the per-example loss
// [B...].
func inferCrossEntropy(args []Arg, _ Attrs) (Type, error) {
	logits, labels := args[0], args[1]
	if err := wantFloat("sparse_cross_entropy", logits); err != nil {
		return Type{}, err
	}
	if err := wantInt("sparse_cross_entropy", labels); err != nil {
		return Type{}, err
	}
	ls := logits.Type.Shape
	if ls.Rank() < 1 || !ls[:ls.Rank()-1].Equal(labels.Type.Shape) {
		return Type{}, errf("sparse_cross_entropy", "labels %s of type %s must have the shape of logits %s of type %s without its last dim",
			labels.Name, labels.Type, logits.Name, logits.Type)
	}
	return Type{logits.Type.DType, labels.Type.Shape.Clone()}, nil
}

// window holds the spatial attributes of conv and pooling: per spatial dim (h, w).
type window struct{ size, stride, pad [2]int }

func windowAttrs(op string, at Attrs, size []int) (window, error) {
	var w window
	stride, pad := at.Ints("stride"), at.Ints("pad")
	if len(size) != 2 || len(stride) != 2 || len(pad) != 2 {
		return w, errf(op, "window, stride and pad need 2 entries each (h, w)")
	}
	for i := 0; i < 2; i++ {
		w.size[i], w.stride[i], w.pad[i] = size[i], stride[i], pad[i]
		if size[i] <= 0 || stride[i] <= 0 || pad[i] < 0 || pad[i] >= size[i] {
			return w, errf(op, "need window > pad >= 0 and stride > 0, got window %v stride %v pad %v", Shape(size), Shape(stride), Shape(pad))
		}
	}
	return w, nil
}

// out is the spatial output size for an input of spatial size hw, or an error if the window
// does not fit.
func (w window) out(op string, hw [2]int) ([2]int, error) {
	var o [2]int
	for i := 0; i < 2; i++ {
		span := hw[i] + 2*w.pad[i] - w.size[i]
		if span < 0 {
			return o, errf(op, "window %d does not fit input size %d with pad %d", w.size[i], hw[i], w.pad[i])
		}
		o[i] = span/w.stride[i] + 1
	}
	return o, nil
}

func spatial(s Shape) [2]int { return [2]int{s[2], s[3]} }

func inferConv(args []Arg, at Attrs) (Type, error) {
	x, f := args[0], args[1]
	if err := convOperands("conv2d", x, f); err != nil {
		return Type{}, err
	}
	if x.Type.Shape[1] != f.Type.Shape[1] {
		return Type{}, errf("conv2d", "channels differ: %s is %s but %s is %s", x.Name, x.Type, f.Name, f.Type)
	}
	w, err := windowAttrs("conv2d", at, f.Type.Shape[2:])
	if err != nil {
		return Type{}, err
	}
	o, err := w.out("conv2d", spatial(x.Type.Shape))
	return Type{x.Type.DType, Shape{x.Type.Shape[0], f.Type.Shape[0], o[0], o[1]}}, err
}

func convOperands(op string, a, b Arg) error {
	for _, x := range []Arg{a, b} {
		if err := wantRank(op, x, 4); err != nil {
			return err
		}
		if err := wantFloat(op, x); err != nil {
			return err
		}
	}
	return sameDType(op, []Arg{a, b})
}

// inferConvInputGrad: dy [N,O,Ho,Wo] and filter [O,C,KH,KW] give dx of the input shape given
// by the shape attribute, which must convolve back to dy's shape.
func inferConvInputGrad(args []Arg, at Attrs) (Type, error) {
	dy, f := args[0], args[1]
	if err := convOperands("conv2d_input_grad", dy, f); err != nil {
		return Type{}, err
	}
	xs := Shape(at.Ints("shape"))
	if xs.Rank() != 4 {
		return Type{}, errf("conv2d_input_grad", "shape must be 4-D, got %s", xs)
	}
	want, err := inferConv([]Arg{{"input", Type{dy.Type.DType, xs}}, f}, at)
	if err == nil && !want.Shape.Equal(dy.Type.Shape) {
		err = errf("conv2d_input_grad", "%s is %s but convolving %s gives %s", dy.Name, dy.Type, xs, want.Shape)
	}
	return Type{dy.Type.DType, xs.Clone()}, err
}

// inferConvFilterGrad: x [N,C,H,W] and dy [N,O,Ho,Wo] give the filter gradient [O,C,KH,KW]
// for the kernel size given by the kernel attribute.
func inferConvFilterGrad(args []Arg, at Attrs) (Type, error) {
	x, dy := args[0], args[1]
	if err := convOperands("conv2d_filter_grad", x, dy); err != nil {
		return Type{}, err
	}
	k := at.Ints("kernel")
	if len(k) != 2 {
		return Type{}, errf("conv2d_filter_grad", "kernel must have 2 entries, got %s", Shape(k))
	}
	fs := Shape{dy.Type.Shape[1], x.Type.Shape[1], k[0], k[1]}
	want, err := inferConv([]Arg{x, {"filter", Type{x.Type.DType, fs}}}, at)
	if err == nil && !want.Shape.Equal(dy.Type.Shape) {
		err = errf("conv2d_filter_grad", "%s is %s but convolving %s gives %s", dy.Name, dy.Type, x.Name, want.Shape)
	}
	return Type{x.Type.DType, fs}, err
}

func inferPool(name string) func([]Arg, Attrs) (Type, error) {
	return func(args []Arg, at Attrs) (Type, error) {
		x := args[0]
		if err := wantRank(name, x, 4); err != nil {
			return Type{}, err
		}
		if err := wantFloat(name, x); err != nil {
			return Type{}, err
		}
		w, err := windowAttrs(name, at, at.Ints("window"))
		if err != nil {
			return Type{}, err
		}
		o, err := w.out(name, spatial(x.Type.Shape))
		return Type{x.Type.DType, Shape{x.Type.Shape[0], x.Type.Shape[1], o[0], o[1]}}, err
	}
}

// inferMaxPoolGrad: x and dy (the pooled gradient) give dx of x's type.
func inferMaxPoolGrad(args []Arg, at Attrs) (Type, error) {
	x, dy := args[0], args[1]
	pooled, err := inferPool("max_pool_grad")(args[:1], at)
	if err != nil {
		return Type{}, err
	}
	if !pooled.Equal(dy.Type) {
		return Type{}, errf("max_pool_grad", "%s is %s but pooling %s gives %s", dy.Name, dy.Type, x.Name, pooled)
	}
	return x.Type, nil
}

// inferAvgPoolGrad: dy gives dx of the input shape given by the shape attribute.
func inferAvgPoolGrad(args []Arg, at Attrs) (Type, error) {
	dy := args[0]
	xs := Shape(at.Ints("shape"))
	if xs.Rank() != 4 {
		return Type{}, errf("avg_pool_grad", "shape must be 4-D, got %s", xs)
	}
	pooled, err := inferPool("avg_pool_grad")([]Arg{{"input", Type{dy.Type.DType, xs}}}, at)
	if err == nil && !pooled.Equal(dy.Type) {
		err = errf("avg_pool_grad", "%s is %s but pooling %s gives %s", dy.Name, dy.Type, xs, pooled.Shape)
	}
	return Type{dy.Type.DType, xs.Clone()}, err
}
