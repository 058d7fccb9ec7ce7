package passes

import (
	"context"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// The finite-difference harness of the gradient test: a tiny f64 graph around one op,
// loss = Σ op(...)·weights, and Grad's gradients compared against central differences of
// the loss computed by the interpreter.

// dist says how a tensor's test data is drawn.
type dist int

const (
	normal   dist = iota // N(0, 1)
	positive             // uniform in [0.5, 2]: away from the poles of log, div, sqrt
)

// caseGraph builds one test graph and its feeds.
type caseGraph struct {
	t      *testing.T
	g      *ir.Graph
	rng    *rand.Rand
	feeds  interp.Feeds
	params []ir.ValueID
}

func newCaseGraph(t *testing.T, name string) *caseGraph {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &caseGraph{t: t, g: ir.NewGraph("grad_" + name), rng: rand.New(rand.NewPCG(7, h.Sum64())), feeds: interp.Feeds{}}
}

func (c *caseGraph) pos() ir.Pos { return ir.Pos{File: "case.ir", Line: len(c.g.Values) + 1, Col: 1} }

func (c *caseGraph) data(d dist, n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		if d == positive {
			xs[i] = 0.5 + 1.5*c.rng.Float64()
		} else {
			xs[i] = c.rng.NormFloat64()
		}
	}
	return xs
}

func (c *caseGraph) leaf(op ir.Op, name string, t ir.Type, data []float64) ir.ValueID {
	id, err := c.g.Declare(op, name, t, -1, c.pos())
	require.NoError(c.t, err)
	c.feeds[name] = kernels.FromF64(t.DType, t.Shape, data)
	return id
}

// param declares an f64 param the test differentiates with respect to.
func (c *caseGraph) param(name string, d dist, dims ...int) ir.ValueID {
	s := ir.Shape(dims)
	id := c.leaf(ir.OpParam, name, ir.Type{DType: ir.F64, Shape: s}, c.data(d, int(s.NumElements())))
	c.params = append(c.params, id)
	return id
}

// input declares f64 data that is not differentiated.
func (c *caseGraph) input(name string, d dist, dims ...int) ir.ValueID {
	s := ir.Shape(dims)
	return c.leaf(ir.OpInput, name, ir.Type{DType: ir.F64, Shape: s}, c.data(d, int(s.NumElements())))
}

// ints declares integer data uniform in [0, limit).
func (c *caseGraph) ints(name string, limit int, dims ...int) ir.ValueID {
	s := ir.Shape(dims)
	xs := make([]float64, s.NumElements())
	for i := range xs {
		xs[i] = float64(c.rng.IntN(limit))
	}
	return c.leaf(ir.OpInput, name, ir.Type{DType: ir.I64, Shape: s}, xs)
}

func (c *caseGraph) op(op ir.Op, at ir.Attrs, args ...ir.ValueID) ir.ValueID {
	id, err := c.g.Append(op, c.g.FreshName(op.String()), args, at, c.pos())
	require.NoError(c.t, err)
	return id
}

// finish appends loss = Σ y·w with fixed random weights w, so that every element of y
// reaches the loss with its own coefficient, and marks it the output.
func (c *caseGraph) finish(y ir.ValueID) ir.ValueID {
	yt := c.g.Values[y].Type
	w := c.input("weights", normal, yt.Shape...)
	if yt.DType != ir.F64 {
		w = c.op(ir.OpCast, ir.Attrs{}.With("to", yt.DType), w)
	}
	l := c.op(ir.OpMul, nil, y, w)
	if yt.Shape.Rank() > 0 {
		l = c.op(ir.OpReduceSum, ir.Attrs{}.With("axes", allAxes(yt.Shape.Rank())), l)
	}
	if yt.DType != ir.F64 {
		l = c.op(ir.OpCast, ir.Attrs{}.With("to", ir.F64), l)
	}
	c.g.AddOutput(l, ir.Pos{})
	return l
}

func runLoss(t *testing.T, g *ir.Graph, feeds interp.Feeds) float64 {
	r, err := interp.Run(context.Background(), g, feeds)
	require.NoError(t, err)
	return r.Outputs[0].At(0)
}

// numericGrad is the central difference of the loss with respect to every element of p.
func numericGrad(t *testing.T, g *ir.Graph, feeds interp.Feeds, p string, h float64) []float64 {
	orig := feeds[p]
	out := make([]float64, orig.Len())
	for i := range out {
		x := orig.Clone()
		feeds[p] = x
		x.Set(i, orig.At(i)+h)
		up := runLoss(t, g, feeds)
		x.Set(i, orig.At(i)-h)
		down := runLoss(t, g, feeds)
		out[i] = (up - down) / (2 * h)
	}
	feeds[p] = orig
	return out
}

// relErr is ‖a-b‖ / max(‖a‖, ‖b‖) in the 2-norm.
func relErr(a, b []float64) float64 {
	var d, na, nb float64
	for i := range a {
		d += (a[i] - b[i]) * (a[i] - b[i])
		na += a[i] * a[i]
		nb += b[i] * b[i]
	}
	den := math.Sqrt(math.Max(na, nb))
	if den == 0 {
		return 0
	}
	return math.Sqrt(d) / den
}

func norm(a []float64) float64 {
	var s float64
	for _, x := range a {
		s += x * x
	}
	return math.Sqrt(s)
}
