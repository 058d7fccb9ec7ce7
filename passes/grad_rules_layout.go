package passes

import (
	"slices"

	"github.com/autopar/autopar/ir"
)

// Gradients of the layout ops and the special ops (gather, cross-entropy, convolution,
// pooling and the linear gradient ops of the last two).

var layoutRules = map[ir.Op]gradRule{
	ir.OpReshape: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.reshape("dx", c.dy, c.shape(c.x(0)))
	})},
	ir.OpTranspose: {fn: unaryRule(func(c *gctx) ir.ValueID {
		perm := c.v.Attrs.Ints("perm")
		inv := make([]int, len(perm))
		for i, p := range perm {
			inv[p] = i
		}
		return c.op("dx", ir.OpTranspose, ir.Attrs{}.With("perm", inv), c.dy)
	})},
	ir.OpBroadcast: {fn: unaryRule(gradBroadcast)},
	ir.OpSlice:     {fn: unaryRule(gradSlice)},
	// concat: each operand's gradient is its slice of dy.
	ir.OpConcat: {fn: func(c *gctx) []ir.ValueID {
		axis, s := c.v.Attrs.Int("axis"), c.v.Type.Shape
		offsets := make([]int, len(c.v.Args)+1)
		for i, a := range c.v.Args {
			offsets[i+1] = offsets[i] + c.shape(a)[axis]
		}
		return c.per(func(i int) ir.ValueID {
			start, limit := make([]int, s.Rank()), slices.Clone([]int(s))
			start[axis], limit[axis] = offsets[i], offsets[i+1]
			return c.op(argTag(i), ir.OpSlice, ir.Attrs{}.With("start", start).With("limit", limit), c.dy)
		})
	}},
}

// gradBroadcast sums dy over the result dims the operand does not have and over the dims it
// stretched from 1, then reshapes to the operand's shape.
func gradBroadcast(c *gctx) ir.ValueID {
	xs, s, dims := c.shape(c.x(0)), c.v.Type.Shape, c.v.Attrs.Ints("dims")
	var axes []int
	for d := range s {
		i := slices.Index(dims, d)
		if i < 0 || (xs[i] == 1 && s[d] != 1) {
			axes = append(axes, d)
		}
	}
	return c.reshape("dx", c.reduceSum("sum", c.dy, axes), xs)
}

// gradSlice pads dy back to the operand's shape with zeros, one concat per dim that was
// cut: concat keeps it a layout op the sharding pass already knows.
func gradSlice(c *gctx) ir.ValueID {
	xs, start, limit := c.shape(c.x(0)), c.v.Attrs.Ints("start"), c.v.Attrs.Ints("limit")
	cur := c.dy
	for d := range xs {
		lo, hi := start[d], xs[d]-limit[d]
		if lo == 0 && hi == 0 {
			continue
		}
		var parts []ir.ValueID
		pad := func(n int) ir.ValueID {
			t := c.typ(cur)
			t.Shape = t.Shape.Clone()
			t.Shape[d] = n
			return c.b.filled("d."+c.v.Name+".zeros", t, 0)
		}
		if lo > 0 {
			parts = append(parts, pad(lo))
		}
		parts = append(parts, cur)
		if hi > 0 {
			parts = append(parts, pad(hi))
		}
		cur = c.op("pad", ir.OpConcat, ir.Attrs{}.With("axis", d), parts...)
	}
	return cur
}

var specialRules = map[ir.Op]gradRule{
	// gather(table, ids): the rows of dy summed into a zero table at ids.
	ir.OpGather: {discrete: []int{1}, fn: unaryRule(func(c *gctx) ir.ValueID {
		rows := c.shape(c.x(0))[0]
		return c.op("dtable", ir.OpScatterAdd, ir.Attrs{}.With("rows", rows), c.x(1), c.dy)
	})},
	// scatter_add(ids, updates): each update's gradient is the row of dy it went to.
	ir.OpScatterAdd: {discrete: []int{0}, fn: func(c *gctx) []ir.ValueID {
		return []ir.ValueID{ir.NoValue, c.op("dupd", ir.OpGather, nil, c.dy, c.x(0))}
	}},
	ir.OpSparseCrossEntropy: {discrete: []int{1}, fn: unaryRule(gradCrossEntropy)},
	ir.OpConv2D:             {fn: gradConv},
	// conv2d_input_grad(dy, f) is linear in each operand: its adjoint in dy is the forward
	// convolution, in f the filter gradient with the roles of input and output swapped.
	ir.OpConv2DInputGrad: {fn: func(c *gctx) []ir.ValueID {
		conv := convAttrs(c.v.Attrs)
		return c.per(func(i int) ir.ValueID {
			if i == 0 {
				return c.op("ddy", ir.OpConv2D, conv, c.dy, c.x(1))
			}
			k := c.shape(c.x(1))[2:]
			return c.op("df", ir.OpConv2DFilterGrad, conv.With("kernel", []int(k)), c.dy, c.x(0))
		})
	}},
	// conv2d_filter_grad(x, dy) is linear in each operand too.
	ir.OpConv2DFilterGrad: {fn: func(c *gctx) []ir.ValueID {
		conv := convAttrs(c.v.Attrs)
		return c.per(func(i int) ir.ValueID {
			if i == 0 {
				xs := c.shape(c.x(0))
				return c.op("dx", ir.OpConv2DInputGrad, conv.With("shape", []int(xs)), c.x(1), c.dy)
			}
			return c.op("ddy", ir.OpConv2D, conv, c.x(0), c.dy)
		})
	}},
	// max_pool: the kernel's max_pool_grad routes dy to each window's maximum, with the
	// kernel's tie rule.
	ir.OpMaxPool: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.op("dx", ir.OpMaxPoolGrad, c.v.Attrs, c.x(0), c.dy)
	})},
	ir.OpAvgPool: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.op("dx", ir.OpAvgPoolGrad, c.v.Attrs.With("shape", []int(c.shape(c.x(0)))), c.dy)
	})},
	// avg_pool_grad is linear in dy; its adjoint is avg_pool itself.
	ir.OpAvgPoolGrad: {fn: unaryRule(func(c *gctx) ir.ValueID {
		at := ir.Attrs{}.With("window", c.v.Attrs.Ints("window")).With("stride", c.v.Attrs.Ints("stride")).With("pad", c.v.Attrs.Ints("pad"))
		return c.op("ddy", ir.OpAvgPool, at, c.dy)
	})},
}

func convAttrs(at ir.Attrs) ir.Attrs {
	return ir.Attrs{}.With("stride", at.Ints("stride")).With("pad", at.Ints("pad"))
}

// gradConv: dx = conv2d_input_grad(dy, f), df = conv2d_filter_grad(x, dy). The input shape
// and kernel size ride along as attributes: with a stride, several input sizes convolve to
// the same output size.
func gradConv(c *gctx) []ir.ValueID {
	conv := convAttrs(c.v.Attrs)
	return c.per(func(i int) ir.ValueID {
		if i == 0 {
			xs := c.shape(c.x(0))
			return c.op("dx", ir.OpConv2DInputGrad, conv.With("shape", []int(xs)), c.dy, c.x(1))
		}
		k := c.shape(c.x(1))[2:]
		return c.op("df", ir.OpConv2DFilterGrad, conv.With("kernel", []int(k)), c.x(0), c.dy)
	})
}

// gradCrossEntropy: loss = logsumexp(logits) - logits[label], so
// dlogits = (softmax(logits) - onehot(label))·dy. The one-hot is eq(iota, labels) cast to
// float: elementwise ops that shard like the logits.
func gradCrossEntropy(c *gctx) ir.ValueID {
	logits, labels := c.x(0), c.x(1)
	lt := c.typ(logits)
	last := lt.Shape.Rank() - 1
	batch := allAxes(last)
	bAt := func(s ir.Shape) ir.Attrs { return ir.Attrs{}.With("dims", batch).With("shape", s) }
	p := c.op("p", ir.OpSoftmax, ir.Attrs{}.With("axis", last), logits)
	iota := c.op("classes", ir.OpIota, ir.Attrs{}.With("axis", last).With("type", ir.Type{DType: c.typ(labels).DType, Shape: lt.Shape}))
	lb := c.op("labelsb", ir.OpBroadcast, bAt(lt.Shape), labels)
	onehot := c.op("onehot", ir.OpCast, ir.Attrs{}.With("to", lt.DType), c.bin("hit", ir.OpEq, iota, lb))
	dyb := c.op("dyb", ir.OpBroadcast, bAt(lt.Shape), c.dy)
	return c.mul("dlogits", c.sub("resid", p, onehot), dyb)
}
