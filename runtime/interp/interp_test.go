package interp

import (
	"context"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
	"github.com/stretchr/testify/require"
)

func typ(dt ir.DType, dims ...int) ir.Type { return ir.Type{DType: dt, Shape: ir.Shape(dims)} }

// smallGraph is y = relu(x·w) + b, loss = reduce_sum(y), with w updated to w - 0.5·w.
func smallGraph(t *testing.T) *ir.Graph {
	g := ir.NewGraph("small")
	pos := func(line int) ir.Pos { return ir.Pos{File: "small.ir", Line: line, Col: 1} }
	must := func(id ir.ValueID, err error) ir.ValueID {
		t.Helper()
		require.NoError(t, err)
		return id
	}
	x := must(g.Declare(ir.OpInput, "x", typ(ir.F64, 2, 3), 0, pos(1)))
	w := must(g.Declare(ir.OpParam, "w", typ(ir.F64, 3, 2), -1, pos(2)))
	b := must(g.Append(ir.OpParam, "b", nil, ir.Attrs{}.With("type", typ(ir.F64, 2)).With("init", "ones"), pos(3)))
	h := must(g.Append(ir.OpMatMul, "h", []ir.ValueID{x, w}, nil, pos(4)))
	r := must(g.Append(ir.OpRelu, "r", []ir.ValueID{h}, nil, pos(5)))
	y := must(g.Append(ir.OpAdd, "y", []ir.ValueID{r, b}, nil, pos(6)))
	loss := must(g.Append(ir.OpReduceSum, "loss", []ir.ValueID{y}, ir.Attrs{}.With("axes", []int{0, 1}), pos(7)))
	half := must(g.Append(ir.OpConstant, "half", nil, ir.Attrs{}.With("value", 0.5).With("type", typ(ir.F64)), pos(8)))
	wh := must(g.Append(ir.OpMul, "wh", []ir.ValueID{w, half}, nil, pos(9)))
	wn := must(g.Append(ir.OpSub, "w.next", []ir.ValueID{w, wh}, nil, pos(10)))
	g.AddOutput(loss, pos(11))
	g.AddUpdate(w, wn, pos(12))
	require.NoError(t, ir.Verify(g))
	return g
}

func TestRunSmallGraph(t *testing.T) {
	g := smallGraph(t)
	f := Feeds{
		"x": kernels.FromF64(ir.F64, ir.Shape{2, 3}, []float64{1, 2, 3, -1, -2, -3}),
		"w": kernels.FromF64(ir.F64, ir.Shape{3, 2}, []float64{1, -1, 1, -1, 1, -1}),
		"b": kernels.FromF64(ir.F64, ir.Shape{2}, []float64{1, 1}),
	}
	// h = [[6,-6],[-6,6]], relu = [[6,0],[0,6]], +1 each: sum 12 + 4 = 16.
	r, err := Run(context.Background(), g, f)
	require.NoError(t, err)
	require.Equal(t, []float64{16}, r.Outputs[0].Float64s())
	require.Equal(t, []float64{0.5, -0.5, 0.5, -0.5, 0.5, -0.5}, r.Updates["w"].Float64s())
	h, _ := g.Lookup("h")
	require.Nil(t, r.Values[h], "h is freed after its last use")

	k, err := RunKeep(context.Background(), g, f)
	require.NoError(t, err)
	require.Equal(t, []float64{6, -6, -6, 6}, k.Values[h].Float64s())

	f.Apply(r)
	require.Equal(t, r.Updates["w"], f["w"])
	r2, err := Run(context.Background(), g, f)
	require.NoError(t, err)
	require.Equal(t, []float64{10}, r2.Outputs[0].Float64s()) // relu(±3) + 1s
}

func TestRunErrors(t *testing.T) {
	g := smallGraph(t)
	good := func() Feeds {
		return Feeds{"x": kernels.New(typ(ir.F64, 2, 3)), "w": kernels.New(typ(ir.F64, 3, 2)), "b": kernels.New(typ(ir.F64, 2))}
	}
	tests := []struct {
		name  string
		feeds func() Feeds
		ctx   func() context.Context
		want  string
	}{
		{"missing", func() Feeds { f := good(); delete(f, "w"); return f }, context.Background, "small.ir:2:1: missing feed for param w of type f64[3,2]"},
		{"mistyped", func() Feeds { f := good(); f["x"] = kernels.New(typ(ir.F32, 2, 3)); return f }, context.Background, "small.ir:1:1: feed for input x is f32[2,3], want f64[2,3]"},
		{"bad storage", func() Feeds { f := good(); f["b"] = &kernels.Tensor{Type: typ(ir.F64, 2), F64: []float64{1}}; return f }, context.Background, "feed for param b"},
		{"cancelled", good, func() context.Context { c, cancel := context.WithCancel(context.Background()); cancel(); return c }, "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(tt.ctx(), g, tt.feeds())
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRunKernelErrorIsPositioned(t *testing.T) {
	g := ir.NewGraph("div")
	a, err := g.Declare(ir.OpInput, "a", typ(ir.I64, 2), -1, ir.Pos{File: "d.ir", Line: 1, Col: 1})
	require.NoError(t, err)
	q, err := g.Append(ir.OpDiv, "q", []ir.ValueID{a, a}, nil, ir.Pos{File: "d.ir", Line: 2, Col: 5})
	require.NoError(t, err)
	g.AddOutput(q, ir.Pos{})
	_, err = Run(context.Background(), g, Feeds{"a": kernels.FromF64(ir.I64, ir.Shape{2}, []float64{1, 0})})
	require.EqualError(t, err, "d.ir:2:5: q: div: integer division by zero")
}

func TestInitParams(t *testing.T) {
	g := ir.NewGraph("p")
	for _, p := range []struct {
		name, init string
		t          ir.Type
	}{{"w", "normal", typ(ir.F32, 64, 32)}, {"g", "ones", typ(ir.F16, 4)}, {"b", "zeros", typ(ir.F32, 4)}, {"v", "normal", typ(ir.F64, 500)}} {
		_, err := g.Append(ir.OpParam, p.name, nil, ir.Attrs{}.With("type", p.t).With("init", p.init), ir.Pos{})
		require.NoError(t, err)
	}
	_, err := g.Declare(ir.OpState, "w.m", typ(ir.F32, 64, 32), -1, ir.Pos{})
	require.NoError(t, err)
	f := InitParams(g, 1)
	require.Len(t, f, 5)
	require.Equal(t, []float64{1, 1, 1, 1}, f["g"].Float64s())
	require.Equal(t, []float64{0, 0, 0, 0}, f["b"].Float64s())
	require.Equal(t, make([]float64, 64*32), f["w.m"].Float64s())
	mean, sq := moments(f["w"].Float64s())
	require.InDelta(t, 0, mean, 0.01)
	require.InDelta(t, 1.0/64, sq, 0.003, "variance 1/fan_in")
	_, sq = moments(f["v"].Float64s())
	require.InDelta(t, 1, sq, 0.2, "1-D params have fan_in 1")

	// Deterministic per (seed, name): another graph holding w alone gets the same w.
	g2 := ir.NewGraph("q")
	_, err = g2.Declare(ir.OpParam, "w", typ(ir.F32, 64, 32), -1, ir.Pos{})
	require.NoError(t, err)
	require.Equal(t, f["w"].F32, InitParams(g2, 1)["w"].F32)
	require.NotEqual(t, f["w"].F32, InitParams(g2, 2)["w"].F32)
}

func moments(xs []float64) (mean, variance float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		variance += (x - mean) * (x - mean)
	}
	return mean, variance / float64(len(xs))
}

func TestRandomInputs(t *testing.T) {
	g := ir.NewGraph("in")
	_, err := g.Declare(ir.OpInput, "x", typ(ir.F32, 100, 10), 0, ir.Pos{})
	require.NoError(t, err)
	_, err = g.Append(ir.OpInput, "ids", nil, ir.Attrs{}.With("type", typ(ir.I32, 1000)).With("batch", 0).With("limit", 7), ir.Pos{})
	require.NoError(t, err)
	f, err := GenerateInputs(g, 3)
	require.NoError(t, err)
	seen := map[int64]bool{}
	for _, v := range f["ids"].Int {
		require.True(t, v >= 0 && v < 7)
		seen[v] = true
	}
	require.Len(t, seen, 7)
	mean, variance := moments(f["x"].Float64s())
	require.InDelta(t, 0, mean, 0.1)
	require.InDelta(t, 1, variance, 0.15)
	require.Equal(t, f["x"].F32, RandomInputs(g, 3)["x"].F32)

	_, err = g.Declare(ir.OpInput, "labels", typ(ir.I64, 100), 0, ir.Pos{File: "m.ir", Line: 4, Col: 1})
	require.NoError(t, err)
	_, err = GenerateInputs(g, 3)
	require.ErrorContains(t, err, "m.ir:4:1: input labels of type i64[100] has no limit")
	r := RandomInputs(g, 3)
	require.NotContains(t, r, "labels")
	_, err = Run(context.Background(), g, r)
	require.ErrorContains(t, err, "need a limit attribute")
}

// TestRepeatedOperandFreedOnce: an op reading one value twice must not recycle its buffer
// twice (two later values would then share storage).
func TestRepeatedOperandFreedOnce(t *testing.T) {
	g := ir.NewGraph("dup")
	x, err := g.Declare(ir.OpInput, "x", typ(ir.F32, 4), -1, ir.Pos{})
	require.NoError(t, err)
	app := func(name string, op ir.Op, args ...ir.ValueID) ir.ValueID {
		id, err := g.Append(op, name, args, nil, ir.Pos{})
		require.NoError(t, err)
		return id
	}
	e := app("e", ir.OpExp, x)
	s := app("s", ir.OpAdd, e, e) // frees e (once)
	a := app("a", ir.OpNeg, x)    // may reuse e's buffer
	b := app("b", ir.OpExp, s)    // must not share a's
	g.AddOutput(a, ir.Pos{})
	g.AddOutput(b, ir.Pos{})
	r, err := Run(context.Background(), g, Feeds{"x": kernels.FromF64(ir.F32, ir.Shape{4}, []float64{0, 1, 2, 3})})
	require.NoError(t, err)
	require.Equal(t, []float64{0, -1, -2, -3}, r.Outputs[0].Float64s())
	require.InDelta(t, 7.389, r.Outputs[1].At(0), 1e-3) // exp(2·e⁰)
}
