package onnx

import (
	"fmt"
	"strings"

	"github.com/autopar/autopar/ir"
)

// lowerMatMul: 2-D by 2-D is the IR's matmul; batched products (numpy semantics: leading
// dims broadcast) are an einsum.
func lowerMatMul(n *node) error {
	a, err := n.rt(0)
	if err != nil {
		return err
	}
	b, err := n.rt(1)
	if err != nil {
		return err
	}
	as, bs := n.im.g.Value(a).Type.Shape, n.im.g.Value(b).Type.Shape
	if as.Rank() < 2 || bs.Rank() < 2 {
		return fmt.Errorf("1-D operands are not supported: %s and %s", as, bs)
	}
	if as.Rank() > 20 || bs.Rank() > 20 {
		return fmt.Errorf("operands of rank %d and %d: at most 20 dims are supported", as.Rank(), bs.Rank())
	}
	if as.Rank() == 2 && bs.Rank() == 2 {
		id, err := n.emit(ir.OpMatMul, "", []ir.ValueID{a, b}, nil)
		n.set(0, id)
		return err
	}
	spec, err := matmulSpec(n, &a, &b, as, bs)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpEinsum, "", []ir.ValueID{a, b}, ir.Attrs{}.With("spec", spec))
	n.set(0, id)
	return err
}

// matmulSpec writes the einsum of a batched matmul, broadcasting the batch dims of a and b
// to a common shape first where they differ.
func matmulSpec(n *node, a, b *ir.ValueID, as, bs ir.Shape) (string, error) {
	const m, k, q = "x", "y", "z"
	if bs.Rank() == 2 {
		batch := letters(as.Rank() - 2)
		return batch + m + k + "," + k + q + "->" + batch + m + q, nil
	}
	if as.Rank() == 2 {
		batch := letters(bs.Rank() - 2)
		return m + k + "," + batch + k + q + "->" + batch + m + q, nil
	}
	ab, bb := as[:as.Rank()-2], bs[:bs.Rank()-2]
	common, err := broadcastShapes(ab, bb)
	if err != nil {
		return "", fmt.Errorf("batch dims do not broadcast: %s and %s", as, bs)
	}
	for _, x := range []struct {
		id *ir.ValueID
		s  ir.Shape
	}{{a, as}, {b, bs}} {
		want := append(common.Clone(), x.s[x.s.Rank()-2:]...)
		if !want.Equal(x.s) {
			id, err := broadcastTo(n, *x.id, want, "bcast")
			if err != nil {
				return "", err
			}
			*x.id = id
		}
	}
	batch := letters(common.Rank())
	return batch + m + k + "," + batch + k + q + "->" + batch + m + q, nil
}

func letters(n int) string { return "abcdefghijklmnopqrstuvw"[:n] }

func broadcastShapes(a, b ir.Shape) (ir.Shape, error) {
	r := max(a.Rank(), b.Rank())
	out := make(ir.Shape, r)
	for i := range out {
		da, db := 1, 1
		if j := i - (r - a.Rank()); j >= 0 {
			da = a[j]
		}
		if j := i - (r - b.Rank()); j >= 0 {
			db = b[j]
		}
		switch {
		case da == db || db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, fmt.Errorf("shapes %s and %s do not broadcast", a, b)
		}
	}
	return out, nil
}

// broadcastTo broadcasts x to shape (numpy: aligned on the right).
func broadcastTo(n *node, x ir.ValueID, shape ir.Shape, suffix string) (ir.ValueID, error) {
	xs := n.im.g.Value(x).Type.Shape
	dims := make([]int, xs.Rank())
	for i := range dims {
		dims[i] = shape.Rank() - xs.Rank() + i
	}
	return n.emit(ir.OpBroadcast, suffix, []ir.ValueID{x}, ir.Attrs{}.With("dims", dims).With("shape", []int(shape)))
}

// lowerGemm: alpha·A'·B' + beta·C, with A' and B' optionally transposed (PyTorch's Linear
// is Gemm with transB=1 and its weight kept [out, in]).
func lowerGemm(n *node) error {
	a, err := n.rt(0)
	if err != nil {
		return err
	}
	b, err := n.rt(1)
	if err != nil {
		return err
	}
	sa, sb := "mk", "kn"
	if n.attrInt("transA", 0) != 0 {
		sa = "km"
	}
	if n.attrInt("transB", 0) != 0 {
		sb = "nk"
	}
	alpha := n.attrFloat("alpha", 1)
	suffix := "mm"
	if alpha == 1 && n.in(2) == nil {
		suffix = ""
	}
	var id ir.ValueID
	if sa == "mk" && sb == "kn" {
		id, err = n.emit(ir.OpMatMul, suffix, []ir.ValueID{a, b}, nil)
	} else {
		id, err = n.emit(ir.OpEinsum, suffix, []ir.ValueID{a, b}, ir.Attrs{}.With("spec", sa+","+sb+"->mn"))
	}
	if err != nil {
		return err
	}
	dt := n.im.g.Value(id).Type.DType
	if alpha != 1 {
		if id, err = scale(n, id, alpha, dt, "alpha"); err != nil {
			return err
		}
	}
	if n.in(2) != nil {
		c, err := n.rt(2)
		if err != nil {
			return err
		}
		if beta := n.attrFloat("beta", 1); beta != 1 {
			if c, err = scale(n, c, beta, dt, "beta"); err != nil {
				return err
			}
		}
		if id, err = n.emit(ir.OpAdd, "", []ir.ValueID{id, c}, nil); err != nil {
			return err
		}
	}
	n.set(0, id)
	return nil
}

func scale(n *node, x ir.ValueID, k float64, dt ir.DType, what string) (ir.ValueID, error) {
	c, err := n.im.scalar(n.outName(0)+"."+what, k, dt, nil)
	if err != nil {
		return ir.NoValue, err
	}
	return n.emit(ir.OpMul, what+"_scaled", []ir.ValueID{x, c}, nil)
}

// lowerEinsum renames the equation's labels to the IR's lowercase letters and spells out
// an implicit result (the labels that appear once, in alphabetical order).
func lowerEinsum(n *node) error {
	eq := strings.ReplaceAll(n.attrString("equation", ""), " ", "")
	if strings.Contains(eq, ".") {
		return fmt.Errorf("equation %q: ellipses are not supported", eq)
	}
	lhs, rhs, explicit := strings.Cut(eq, "->")
	if !explicit {
		count := map[rune]int{}
		for _, r := range lhs {
			count[r]++
		}
		var once []rune
		for r, c := range count {
			if c == 1 && r != ',' {
				once = append(once, r)
			}
		}
		rhs = sortRunes(once)
	}
	rename := map[rune]rune{}
	var out strings.Builder
	for _, r := range lhs + "->" + rhs {
		if r == ',' || r == '-' || r == '>' {
			out.WriteRune(r)
			continue
		}
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("equation %q: label %q is not a letter", eq, r)
		}
		if _, ok := rename[r]; !ok {
			if len(rename) == 26 {
				return fmt.Errorf("equation %q uses more than 26 labels", eq)
			}
			rename[r] = rune('a' + len(rename))
		}
		out.WriteRune(rename[r])
	}
	args := make([]ir.ValueID, n.nin())
	for i := range args {
		id, err := n.rt(i)
		if err != nil {
			return err
		}
		args[i] = id
	}
	id, err := n.emit(ir.OpEinsum, "", args, ir.Attrs{}.With("spec", out.String()))
	n.set(0, id)
	return err
}

func sortRunes(rs []rune) string {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j] < rs[j-1]; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
	return string(rs)
}

// reshapeTo emits a reshape of input 0 to shape, or aliases it when the shape is its own.
func reshapeTo(n *node, shape ir.Shape) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	if t.Shape.Equal(shape) {
		return n.alias(0, 0)
	}
	if shape.NumElements() != t.Shape.NumElements() {
		return fmt.Errorf("cannot reshape %s to %s", t, shape)
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	id, err := n.emit(ir.OpReshape, "", []ir.ValueID{x}, ir.Attrs{}.With("shape", []int(shape)))
	n.set(0, id)
	return err
}

func lowerReshape(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	want, err := n.ints(1, "shape")
	if err != nil {
		return err
	}
	allowZero := n.attrInt("allowzero", 0) != 0
	shape := make(ir.Shape, len(want))
	infer := -1
	for i, d := range want {
		switch {
		case d == 0 && !allowZero && i < t.Shape.Rank():
			shape[i] = t.Shape[i]
		case d == -1 && infer < 0:
			infer, shape[i] = i, 1
		case d > 0:
			shape[i] = d
		default:
			return fmt.Errorf("shape %v is not a shape autopar can reshape %s to", want, t)
		}
	}
	if infer >= 0 {
		rest := shape.NumElements()
		if rest == 0 || t.Shape.NumElements()%rest != 0 {
			return fmt.Errorf("cannot reshape %s to %v", t, want)
		}
		shape[infer] = int(t.Shape.NumElements() / rest)
	}
	if _, err := checkShape(shape, n.im.sizeLimit()); err != nil {
		return err
	}
	return reshapeTo(n, shape)
}

func lowerFlatten(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	ax := n.attrInt("axis", 1)
	if ax < 0 {
		ax += t.Shape.Rank()
	}
	if ax < 0 || ax > t.Shape.Rank() {
		return fmt.Errorf("axis %d is out of range for %s", n.attrInt("axis", 1), t)
	}
	return reshapeTo(n, ir.Shape{int(ir.Shape(t.Shape[:ax]).NumElements()), int(ir.Shape(t.Shape[ax:]).NumElements())})
}

func lowerTranspose(n *node) error {
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	r := n.im.g.Value(x).Type.Shape.Rank()
	perm, ok := n.attrInts("perm")
	if !ok {
		perm = make([]int, r)
		for i := range perm {
			perm[i] = r - 1 - i
		}
	}
	id, err := n.emit(ir.OpTranspose, "", []ir.ValueID{x}, ir.Attrs{}.With("perm", perm))
	n.set(0, id)
	return err
}

// axesOf reads the axes of Unsqueeze and Squeeze: an input from opset 13.
func axesOf(n *node) ([]int, bool, error) {
	if n.in(1) != nil {
		a, err := n.ints(1, "axes")
		return a, true, err
	}
	a, ok := n.attrInts("axes")
	return a, ok, nil
}

func lowerUnsqueeze(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	axes, ok, err := axesOf(n)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("it has no axes")
	}
	r := t.Shape.Rank() + len(axes)
	ones := make([]bool, r)
	for _, a := range axes {
		a, err := axis(a, r)
		if err != nil {
			return err
		}
		ones[a] = true
	}
	shape, j := make(ir.Shape, r), 0
	for i := range shape {
		if ones[i] {
			shape[i] = 1
			continue
		}
		if j >= t.Shape.Rank() {
			return fmt.Errorf("axes %v repeat", axes)
		}
		shape[i], j = t.Shape[j], j+1
	}
	return reshapeTo(n, shape)
}

func lowerSqueeze(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	axes, ok, err := axesOf(n)
	if err != nil {
		return err
	}
	drop := make([]bool, t.Shape.Rank())
	for i, d := range t.Shape {
		drop[i] = !ok && d == 1
	}
	for _, a := range axes {
		a, err := axis(a, t.Shape.Rank())
		if err != nil {
			return err
		}
		if t.Shape[a] != 1 {
			return fmt.Errorf("dim %d of %s is not 1", a, t)
		}
		drop[a] = true
	}
	var shape ir.Shape
	for i, d := range t.Shape {
		if !drop[i] {
			shape = append(shape, d)
		}
	}
	return reshapeTo(n, shape)
}

func lowerConcat(n *node) error {
	var args []ir.ValueID
	for i := range n.nin() {
		if n.in(i) == nil {
			continue
		}
		id, err := n.rt(i)
		if err != nil {
			return err
		}
		args = append(args, id)
	}
	if len(args) == 0 {
		return fmt.Errorf("it has no inputs")
	}
	ax, err := axis(n.attrInt("axis", 0), n.im.g.Value(args[0]).Type.Shape.Rank())
	if err != nil {
		return err
	}
	if len(args) == 1 {
		n.set(0, args[0])
		return nil
	}
	id, err := n.emit(ir.OpConcat, "", args, ir.Attrs{}.With("axis", ax))
	n.set(0, id)
	return err
}

// slice emits x[start:limit] (full ranges elsewhere), or x itself when that is everything.
func slice(n *node, x ir.ValueID, start, limit []int, suffix string) (ir.ValueID, error) {
	s := n.im.g.Value(x).Type.Shape
	full := true
	for i := range s {
		full = full && start[i] == 0 && limit[i] == s[i]
	}
	if full {
		return x, nil
	}
	return n.emit(ir.OpSlice, suffix, []ir.ValueID{x}, ir.Attrs{}.With("start", start).With("limit", limit))
}

func lowerSlice(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	s := t.Shape
	starts, err := n.ints(1, "starts")
	if err != nil {
		return err
	}
	ends, err := n.ints(2, "ends")
	if err != nil {
		return err
	}
	axes := allAxes(len(starts))
	if n.in(3) != nil {
		if axes, err = n.ints(3, "axes"); err != nil {
			return err
		}
	}
	if n.in(4) != nil {
		steps, err := n.ints(4, "steps")
		if err != nil {
			return err
		}
		for _, st := range steps {
			if st != 1 {
				return fmt.Errorf("steps %v: only step 1 is supported", steps)
			}
		}
	}
	if len(ends) != len(starts) || len(axes) != len(starts) {
		return fmt.Errorf("starts, ends and axes differ in length")
	}
	start, limit := make([]int, len(s)), s.Clone()
	for i, a := range axes {
		a, err := axis(a, len(s))
		if err != nil {
			return err
		}
		b, e := clampIndex(starts[i], s[a]), clampIndex(ends[i], s[a])
		if e <= b {
			return fmt.Errorf("the slice [%d:%d] of dim %d of %s is empty", starts[i], ends[i], a, t)
		}
		start[a], limit[a] = b, e
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	id, err := slice(n, x, start, limit, "")
	n.set(0, id)
	return err
}

func clampIndex(i, size int) int {
	if i < 0 {
		i += size
	}
	return max(0, min(i, size))
}

func lowerSplit(n *node) error {
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	s := n.im.g.Value(x).Type.Shape
	ax, err := axis(n.attrInt("axis", 0), s.Rank())
	if err != nil {
		return err
	}
	outs := len(n.p.GetOutput())
	sizes, ok := n.attrInts("split")
	if n.in(1) != nil {
		if sizes, err = n.ints(1, "split"); err != nil {
			return err
		}
		ok = true
	}
	if !ok {
		if s[ax]%outs != 0 {
			return fmt.Errorf("dim %d of %s does not split evenly into %d", ax, s, outs)
		}
		sizes = make([]int, outs)
		for i := range sizes {
			sizes[i] = s[ax] / outs
		}
	}
	if len(sizes) != outs {
		return fmt.Errorf("split %v names %d parts for %d outputs", sizes, len(sizes), outs)
	}
	at := 0
	for i, size := range sizes {
		if size <= 0 || at+size > s[ax] {
			return fmt.Errorf("split %v does not fit dim %d of %s", sizes, ax, s)
		}
		start, limit := make([]int, s.Rank()), s.Clone()
		start[ax], limit[ax] = at, at+size
		id, err := n.im.emit(ir.OpSlice, n.outName(i), []ir.ValueID{x}, ir.Attrs{}.With("start", start).With("limit", limit))
		if err != nil {
			return err
		}
		n.set(i, id)
		at += size
	}
	return nil
}

// lowerGather: along axis 0 it is the IR's gather (an embedding lookup, the indices
// data or known); along another axis the data is transposed to put that axis first.
func lowerGather(n *node) error {
	data, err := n.rt(0)
	if err != nil {
		return err
	}
	ds := n.im.g.Value(data).Type.Shape
	ax, err := axis(n.attrInt("axis", 0), ds.Rank())
	if err != nil {
		return err
	}
	iv := n.in(1)
	if iv == nil {
		return fmt.Errorf("indices are missing")
	}
	if iv.c != nil && iv.id == ir.NoValue { // negative known indices count from the end
		c := iv.c.Clone()
		for i := range c.Int {
			if c.Int[i] < 0 {
				c.Int[i] += int64(ds[ax])
			}
			if c.Int[i] < 0 || c.Int[i] >= int64(ds[ax]) {
				return fmt.Errorf("index %d is out of range for dim %d of %s", c.Int[i], ax, ds)
			}
		}
		iv = &val{id: ir.NoValue, c: c, onnx: iv.onnx}
	}
	ids, err := n.im.rt(iv)
	if err != nil {
		return err
	}
	n.im.limit(n.im.rootInput(ids), ds[ax])
	if ax == 0 {
		id, err := n.emit(ir.OpGather, "", []ir.ValueID{data, ids}, nil)
		n.set(0, id)
		return err
	}
	perm := append([]int{ax}, allAxes(ds.Rank())...)
	perm = append(perm[:ax+1], perm[ax+2:]...)
	front, err := n.emit(ir.OpTranspose, "front", []ir.ValueID{data}, ir.Attrs{}.With("perm", perm))
	if err != nil {
		return err
	}
	g, err := n.emit(ir.OpGather, "gathered", []ir.ValueID{front, ids}, nil)
	if err != nil {
		return err
	}
	// g is [ids..., d0.., d(ax-1), d(ax+1)..]: move the ids dims back to position ax.
	ni := n.im.g.Value(ids).Type.Shape.Rank()
	back := make([]int, 0, ni+ds.Rank()-1)
	for i := range ax {
		back = append(back, ni+i)
	}
	for i := range ni {
		back = append(back, i)
	}
	for i := ax + 1; i < ds.Rank(); i++ {
		back = append(back, ni+i-1)
	}
	id, err := n.emit(ir.OpTranspose, "", []ir.ValueID{g}, ir.Attrs{}.With("perm", back))
	n.set(0, id)
	return err
}

func lowerExpand(n *node) error {
	t, err := n.typ(0)
	if err != nil {
		return err
	}
	want, err := n.ints(1, "shape")
	if err != nil {
		return err
	}
	shape, err := broadcastShapes(t.Shape, ir.Shape(want))
	if err != nil {
		return err
	}
	if _, err := checkShape(shape, n.im.sizeLimit()); err != nil {
		return err
	}
	if shape.Equal(t.Shape) {
		return n.alias(0, 0)
	}
	x, err := n.rt(0)
	if err != nil {
		return err
	}
	id, err := broadcastTo(n, x, shape, "")
	n.set(0, id)
	return err
}

// lowerPad takes only the zero padding exporters write before pooling; a real pad belongs
// in the conv or pool that follows.
func lowerPad(n *node) error {
	pads, err := n.ints(1, "pads")
	if err != nil {
		return err
	}
	for _, p := range pads {
		if p != 0 {
			return fmt.Errorf("pads %v: only zero padding is supported (Conv and pooling take their own pads)", pads)
		}
	}
	return n.alias(0, 0)
}
