package passes

import (
	"strings"

	"github.com/autopar/autopar/ir"
)

// Gradients of the contractions, reductions and row-wise ops.

var reduceRules = map[ir.Op]gradRule{
	// matmul is the einsum "mk,kn->mn": da = einsum(dy, b), db = einsum(a, dy), with no
	// explicit transposes, so the sharding pass sees plain contractions.
	ir.OpMatMul: {fn: func(c *gctx) []ir.ValueID {
		return c.per(func(i int) ir.ValueID {
			if i == 0 {
				return c.op("da", ir.OpEinsum, ir.Attrs{}.With("spec", "mn,kn->mk"), c.dy, c.x(1))
			}
			return c.op("db", ir.OpEinsum, ir.Attrs{}.With("spec", "mk,mn->kn"), c.x(0), c.dy)
		})
	}},
	ir.OpEinsum: {fn: gradEinsum},
	ir.OpReduceSum: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.expand("dx", c.dy, c.v.Attrs.Ints("axes"), c.shape(c.x(0)))
	})},
	ir.OpReduceMean: {fn: unaryRule(func(c *gctx) ir.ValueID {
		axes, s := c.v.Attrs.Ints("axes"), c.shape(c.x(0))
		n := 1
		for _, a := range axes {
			n *= s[a]
		}
		return c.expand("dx", c.mul("scaled", c.dy, c.k(1/float64(n))), axes, s)
	})},
	ir.OpReduceMax: {fn: unaryRule(gradReduceMax)},
	// softmax: dx = y·(dy - Σ dy·y).
	ir.OpSoftmax: {fn: unaryRule(func(c *gctx) ir.ValueID {
		axes, s := []int{c.v.Attrs.Int("axis")}, c.v.Type.Shape
		dot := c.reduceSum("dot", c.mul("dyy", c.dy, c.y), axes)
		return c.mul("dx", c.y, c.sub("centered", c.dy, c.expand("dotb", dot, axes, s)))
	})},
	// log_softmax: dx = dy - softmax(x)·Σ dy, with softmax(x) = exp(y).
	ir.OpLogSoftmax: {fn: unaryRule(func(c *gctx) ir.ValueID {
		axes, s := []int{c.v.Attrs.Int("axis")}, c.v.Type.Shape
		tot := c.expand("totb", c.reduceSum("tot", c.dy, axes), axes, s)
		return c.sub("dx", c.dy, c.mul("p.tot", c.op("p", ir.OpExp, nil, c.y), tot))
	})},
	// cumsum: dx is the reverse cumulative sum of dy, Σ_{i≥j} dy_i = Σ dy - cumsum(dy) + dy
	// (ir has no reverse; in f32 this loses a little to cancellation on long axes).
	ir.OpCumsum: {fn: unaryRule(func(c *gctx) ir.ValueID {
		axes, s := []int{c.v.Attrs.Int("axis")}, c.v.Type.Shape
		tot := c.expand("totb", c.reduceSum("tot", c.dy, axes), axes, s)
		cs := c.op("cs", ir.OpCumsum, c.v.Attrs, c.dy)
		return c.add("dx", c.sub("rest", tot, cs), c.dy)
	})},
	ir.OpLayerNorm: {fn: func(c *gctx) []ir.ValueID {
		r := c.v.Type.Shape.Rank()
		return gradNorm(c, []int{r - 1}, r-1)
	}},
	ir.OpBatchNorm: {fn: func(c *gctx) []ir.ValueID {
		s := c.v.Type.Shape
		k := ir.BatchNormGroup(s, c.v.Attrs)
		if k == 0 {
			return gradNorm(c, keptAxes(s.Rank(), []int{1}), 1)
		}
		// Statistics per group of k rows: the same rule on the view [n/k, k, c, ...], whose
		// statistics run over every axis but the group (0) and the channel (2).
		gs := append(ir.Shape{s[0] / k, k}, s[1:]...)
		x, dy := c.reshape("xg", c.x(0), gs), c.reshape("dyg", c.dy, gs)
		return gradNormView(c, x, dy, gs, keptAxes(gs.Rank(), []int{0, 2}), 2, s)
	}},
}

// gradReduceMax sends dy to the positions that hold the maximum. Tie rule: when several
// elements tie for the maximum, dy is split equally among them, so the contributions
// always sum to dy (TensorFlow's rule).
func gradReduceMax(c *gctx) ir.ValueID {
	axes, s := c.v.Attrs.Ints("axes"), c.shape(c.x(0))
	mask := c.bin("mask", ir.OpEq, c.x(0), c.expand("yb", c.y, axes, s))
	count := c.reduceSum("count", c.op("maskf", ir.OpCast, ir.Attrs{}.With("to", c.dt()), mask), axes)
	share := c.expand("shareb", c.div("share", c.dy, count), axes, s)
	return c.where("dx", mask, share, c.k(0))
}

// gradEinsum: the gradient of operand i is the einsum of dy with the other operands into
// i's labels. A label only operand i has (summed away, as in "ij->i") is broadcast back.
func gradEinsum(c *gctx) []ir.ValueID {
	lhs, res, _ := strings.Cut(c.v.Attrs.String("spec"), "->")
	ins := strings.Split(lhs, ",")
	return c.per(func(i int) ir.ValueID {
		others, args := []string{res}, []ir.ValueID{c.dy}
		for j, in := range ins {
			if j != i {
				others, args = append(others, in), append(args, c.x(j))
			}
		}
		var avail string
		var dims []int
		for d, l := range ins[i] {
			if strings.ContainsRune(strings.Join(others, ""), l) {
				avail += string(l)
				dims = append(dims, d)
			}
		}
		e := c.op(argTag(i), ir.OpEinsum, ir.Attrs{}.With("spec", strings.Join(others, ",")+"->"+avail), args...)
		if avail == ins[i] {
			return e
		}
		return c.op(argTag(i)+".b", ir.OpBroadcast, ir.Attrs{}.With("dims", dims).With("shape", c.shape(c.x(i))), e)
	})
}

// gradNorm differentiates layer_norm and batch_norm (training mode: the statistics are
// those of the batch and are differentiated through). stat are the axes the mean and
// biased variance run over; ch is the axis gamma and beta run along. With
// x̂ = (x-μ)·rstd, rstd = 1/√(σ²+eps) and g = dy·γ:
//
//	dβ = Σ dy, dγ = Σ dy·x̂ (over every axis but ch)
//	dx = rstd·(g - mean(g) - x̂·mean(g·x̂)) (means over stat)
//
// A batch_norm with a group (ir.BatchNormGroup) is differentiated on its [n/k, k, c, ...]
// view, with the statistics over each group.
func gradNorm(c *gctx, stat []int, ch int) []ir.ValueID {
	return gradNormView(c, c.x(0), c.dy, c.v.Type.Shape, stat, ch, nil)
}

// gradNormView is gradNorm on a view of x and dy of shape s (a reshape of the op's
// operand and result); dx is reshaped to back when it is not nil.
func gradNormView(c *gctx, x, dy ir.ValueID, s ir.Shape, stat []int, ch int, back ir.Shape) []ir.ValueID {
	param := keptAxes(s.Rank(), []int{ch})
	var xhat, rstd ir.ValueID
	if c.need[0] || c.need[1] {
		xc := c.sub("xc", x, c.expand("mub", c.reduceMean("mu", x, stat), stat, s))
		vr := c.reduceMean("var", c.mul("xc2", xc, xc), stat)
		rstd = c.op("rstd", ir.OpRsqrt, nil, c.add("vareps", vr, c.k(c.v.Attrs.Float("eps"))))
		xhat = c.mul("xhat", xc, c.expand("rstdb", rstd, stat, s))
	}
	return c.per(func(i int) ir.ValueID {
		switch i {
		case 1:
			return c.reduceSum("dgamma", c.mul("dyxhat", dy, xhat), param)
		case 2:
			return c.reduceSum("dbeta", dy, param)
		}
		gb := c.op("gammab", ir.OpBroadcast, ir.Attrs{}.With("dims", []int{ch}).With("shape", s), c.x(1))
		gx := c.mul("g", dy, gb)
		m1 := c.expand("m1b", c.reduceMean("m1", gx, stat), stat, s)
		m2 := c.expand("m2b", c.reduceMean("m2", c.mul("gxhat", gx, xhat), stat), stat, s)
		inner := c.sub("inner", c.sub("gc", gx, m1), c.mul("xm2", xhat, m2))
		dx := c.mul("dx", inner, c.expand("rstdx", rstd, stat, s))
		if back != nil {
			return c.reshape("dxr", dx, back)
		}
		return dx
	})
}
