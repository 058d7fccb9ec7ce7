package passes

import (
	"slices"

	"github.com/autopar/autopar/ir"
)

// gradRule is the gradient of one op: given the adjoint dy of its result, the contribution
// to the adjoint of each operand the sweep asks for.
type gradRule struct {
	// discrete lists operand slots that carry no gradient by design: where's condition,
	// gather's and scatter_add's indices, cross-entropy's labels.
	discrete []int
	// fn returns one value per operand: the contribution where c.need[i], NoValue (or
	// anything) elsewhere. It builds ops only through c.
	fn func(c *gctx) []ir.ValueID
}

func (r gradRule) isDiscrete(j int) bool { return slices.Contains(r.discrete, j) }

// gradRules is the gradient table, keyed by op. An op missing here is not differentiable:
// compares, iota, constant, leaves and max_pool_grad. The ir op table knows nothing of it.
var gradRules map[ir.Op]gradRule

func init() {
	gradRules = map[ir.Op]gradRule{}
	for _, part := range []map[ir.Op]gradRule{elementwiseRules, reduceRules, layoutRules, specialRules} {
		for op, r := range part {
			if _, dup := gradRules[op]; dup {
				panic("passes: two gradient rules for " + op.String())
			}
			gradRules[op] = r
		}
	}
}

// gctx is what a rule sees: the forward value, its adjoint, which operands need a gradient,
// and helpers that append backward ops named "d.<value>.<tag>".
type gctx struct {
	b    *builder
	y    ir.ValueID
	v    ir.Value // a copy of the forward value
	dy   ir.ValueID
	need []bool
}

// x is the ID of operand i.
func (c *gctx) x(i int) ir.ValueID { return c.v.Args[i] }

// typ is the type of any value.
func (c *gctx) typ(id ir.ValueID) ir.Type { return c.b.g.Values[id].Type }

func (c *gctx) shape(id ir.ValueID) ir.Shape { return c.b.g.Values[id].Type.Shape }

func (c *gctx) dt() ir.DType { return c.v.Type.DType }

// per calls f for each operand that needs a gradient and collects the results.
func (c *gctx) per(f func(i int) ir.ValueID) []ir.ValueID {
	out := make([]ir.ValueID, len(c.v.Args))
	for i := range out {
		out[i] = ir.NoValue
		if c.need[i] {
			out[i] = f(i)
		}
	}
	return out
}

// op appends one backward op.
func (c *gctx) op(tag string, op ir.Op, at ir.Attrs, args ...ir.ValueID) ir.ValueID {
	return c.b.emit("d."+c.v.Name+"."+tag, op, at, args...)
}

func (c *gctx) bin(tag string, op ir.Op, a, b ir.ValueID) ir.ValueID { return c.op(tag, op, nil, a, b) }
func (c *gctx) add(tag string, a, b ir.ValueID) ir.ValueID           { return c.bin(tag, ir.OpAdd, a, b) }
func (c *gctx) sub(tag string, a, b ir.ValueID) ir.ValueID           { return c.bin(tag, ir.OpSub, a, b) }
func (c *gctx) mul(tag string, a, b ir.ValueID) ir.ValueID           { return c.bin(tag, ir.OpMul, a, b) }
func (c *gctx) div(tag string, a, b ir.ValueID) ir.ValueID           { return c.bin(tag, ir.OpDiv, a, b) }
func (c *gctx) neg(tag string, a ir.ValueID) ir.ValueID              { return c.op(tag, ir.OpNeg, nil, a) }

// k is a scalar constant of the forward value's dtype.
func (c *gctx) k(v float64) ir.ValueID { return c.b.scalar(c.dt(), v) }

func (c *gctx) where(tag string, cond, a, b ir.ValueID) ir.ValueID {
	return c.op(tag, ir.OpWhere, nil, cond, a, b)
}

func (c *gctx) reshape(tag string, v ir.ValueID, s ir.Shape) ir.ValueID {
	if c.shape(v).Equal(s) {
		return v
	}
	return c.op(tag, ir.OpReshape, ir.Attrs{}.With("shape", s), v)
}

// reduceSum sums v over axes; no axes returns v.
func (c *gctx) reduceSum(tag string, v ir.ValueID, axes []int) ir.ValueID {
	if len(axes) == 0 {
		return v
	}
	return c.op(tag, ir.OpReduceSum, ir.Attrs{}.With("axes", axes), v)
}

func (c *gctx) reduceMean(tag string, v ir.ValueID, axes []int) ir.ValueID {
	if len(axes) == 0 {
		return v
	}
	return c.op(tag, ir.OpReduceMean, ir.Attrs{}.With("axes", axes), v)
}

// expand broadcasts v, the result of reducing a tensor of shape s over axes, back to s:
// the keepdims that ir's reductions lack.
func (c *gctx) expand(tag string, v ir.ValueID, axes []int, s ir.Shape) ir.ValueID {
	if len(axes) == 0 {
		return v
	}
	return c.op(tag, ir.OpBroadcast, ir.Attrs{}.With("dims", keptAxes(len(s), axes)).With("shape", s), v)
}

// keptAxes lists 0..rank-1 without axes.
func keptAxes(rank int, axes []int) []int {
	kept := make([]int, 0, rank)
	for d := 0; d < rank; d++ {
		if !slices.Contains(axes, d) {
			kept = append(kept, d)
		}
	}
	return kept
}

// sumTo undoes numpy broadcasting: it sums v, of a broadcast result's shape, down to shape
// s of the operand that was broadcast (leading dims, and dims where s has 1), then
// reshapes away the dims that were summed but kept as 1.
func (c *gctx) sumTo(tag string, v ir.ValueID, s ir.Shape) ir.ValueID {
	vs := c.shape(v)
	lead := len(vs) - len(s)
	var axes []int
	for d := range vs {
		if d < lead || (s[d-lead] == 1 && vs[d] != 1) {
			axes = append(axes, d)
		}
	}
	return c.reshape(tag+".shape", c.reduceSum(tag+".sum", v, axes), s)
}

// allAxes is 0..rank-1.
func allAxes(rank int) []int {
	a := make([]int, rank)
	for i := range a {
		a[i] = i
	}
	return a
}
