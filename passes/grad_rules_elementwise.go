package passes

import (
	"math"

	"github.com/autopar/autopar/ir"
)

// Gradients of the elementwise ops. Binary ops broadcast like numpy, so each operand's
// contribution is summed back to its own shape (sumTo).

var elementwiseRules = map[ir.Op]gradRule{
	ir.OpAdd: {fn: func(c *gctx) []ir.ValueID {
		return c.per(func(i int) ir.ValueID { return c.sumTo(argTag(i), c.dy, c.shape(c.x(i))) })
	}},
	ir.OpSub: {fn: func(c *gctx) []ir.ValueID {
		return c.per(func(i int) ir.ValueID {
			d := c.sumTo(argTag(i), c.dy, c.shape(c.x(i)))
			if i == 1 {
				d = c.neg("db", d)
			}
			return d
		})
	}},
	ir.OpMul: {fn: func(c *gctx) []ir.ValueID {
		return c.per(func(i int) ir.ValueID {
			return c.sumTo(argTag(i), c.mul(argTag(i)+".prod", c.dy, c.x(1-i)), c.shape(c.x(i)))
		})
	}},
	ir.OpDiv: {fn: gradDiv},
	ir.OpMax: {fn: gradMax},
	// where(cond, a, b): the gradient goes to the branch that was taken; cond gets none.
	ir.OpWhere: {discrete: []int{0}, fn: func(c *gctx) []ir.ValueID {
		zero := c.k(0)
		return c.per(func(i int) ir.ValueID {
			sel := c.where(argTag(i)+".sel", c.x(0), c.dy, zero)
			if i == 2 {
				sel = c.where(argTag(i)+".sel", c.x(0), zero, c.dy)
			}
			return c.sumTo(argTag(i), sel, c.shape(c.x(i)))
		})
	}},
	ir.OpNeg: {fn: unaryRule(func(c *gctx) ir.ValueID { return c.neg("dx", c.dy) })},
	ir.OpExp: {fn: unaryRule(func(c *gctx) ir.ValueID { return c.mul("dx", c.dy, c.y) })},
	ir.OpLog: {fn: unaryRule(func(c *gctx) ir.ValueID { return c.div("dx", c.dy, c.x(0)) })},
	// tanh' = 1 - y².
	ir.OpTanh: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.mul("dx", c.dy, c.sub("slope", c.k(1), c.mul("y2", c.y, c.y)))
	})},
	// relu' is 1 where x > 0 and 0 elsewhere, x = 0 included.
	ir.OpRelu: {fn: unaryRule(func(c *gctx) ir.ValueID {
		pos := c.bin("pos", ir.OpGt, c.x(0), c.b.scalar(c.typ(c.x(0)).DType, 0))
		return c.where("dx", pos, c.dy, c.k(0))
	})},
	ir.OpGelu: {fn: unaryRule(gradGelu)},
	// sigmoid' = y(1 - y).
	ir.OpSigmoid: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.mul("dx", c.dy, c.mul("slope", c.y, c.sub("1my", c.k(1), c.y)))
	})},
	// sqrt' = 1 / (2y).
	ir.OpSqrt: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.div("dx", c.dy, c.mul("2y", c.y, c.k(2)))
	})},
	// rsqrt' = -y / (2x).
	ir.OpRsqrt: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.mul("dx", c.dy, c.mul("slope", c.div("ydx", c.y, c.x(0)), c.k(-0.5)))
	})},
	// cast between float types casts the gradient back; a cast from an integer or bool is
	// not differentiable (the analysis reports it when the loss depends on it).
	ir.OpCast: {fn: unaryRule(func(c *gctx) ir.ValueID {
		dt := c.typ(c.x(0)).DType
		if dt == c.dt() {
			return c.dy
		}
		return c.op("dx", ir.OpCast, ir.Attrs{}.With("to", dt), c.dy)
	})},
	// dropout's mask is a function of (seed, element index) alone and kept elements are
	// scaled by 1/(1-rate), so dropout of dy with the same attributes is its gradient.
	ir.OpDropout: {fn: unaryRule(func(c *gctx) ir.ValueID {
		return c.op("dx", ir.OpDropout, c.v.Attrs, c.dy)
	})},
}

// argTag names the contribution to operand i in temporaries: da, db, dc, ...
func argTag(i int) string { return "d" + string(rune('a'+i)) }

func unaryRule(f func(c *gctx) ir.ValueID) func(c *gctx) []ir.ValueID {
	return func(c *gctx) []ir.ValueID { return []ir.ValueID{f(c)} }
}

// gradDiv: y = a/b, da = dy/b, db = -dy·y/b.
func gradDiv(c *gctx) []ir.ValueID {
	return c.per(func(i int) ir.ValueID {
		if i == 0 {
			return c.sumTo("da", c.div("da.q", c.dy, c.x(1)), c.shape(c.x(0)))
		}
		t := c.div("db.q", c.mul("db.p", c.dy, c.y), c.x(1))
		return c.neg("db", c.sumTo("db", t, c.shape(c.x(1))))
	})
}

// gradMax routes dy to the larger operand. Tie rule: where a == b the whole gradient goes
// to the first operand (mask a >= b), so the two contributions always sum to dy.
func gradMax(c *gctx) []ir.ValueID {
	mask := c.bin("mask", ir.OpGe, c.x(0), c.x(1))
	zero := c.k(0)
	return c.per(func(i int) ir.ValueID {
		sel := c.where(argTag(i)+".sel", mask, c.dy, zero)
		if i == 1 {
			sel = c.where(argTag(i)+".sel", mask, zero, c.dy)
		}
		return c.sumTo(argTag(i), sel, c.shape(c.x(i)))
	})
}

// gradGelu differentiates the exact gelu the kernels compute, y = x·Φ(x):
// y' = Φ(x) + x·φ(x). ir has no erf, so Φ(x) is recovered as y/x, and as 1/2 at x = 0
// where that quotient is 0/0 (the divisor is replaced by 1 there to keep NaN out).
func gradGelu(c *gctx) ir.ValueID {
	x := c.x(0)
	zero := c.bin("x0", ir.OpEq, x, c.k(0))
	safe := c.where("xs", zero, c.k(1), x)
	cdf := c.where("cdf", zero, c.k(0.5), c.div("ydx", c.y, safe))
	pdf := c.mul("pdf", c.op("gauss", ir.OpExp, nil, c.mul("hx2", c.mul("x2", x, x), c.k(-0.5))), c.k(1/math.Sqrt(2*math.Pi)))
	return c.mul("dx", c.dy, c.add("slope", cdf, c.mul("xpdf", x, pdf)))
}
