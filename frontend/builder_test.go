package frontend

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

// line returns the line of its caller, so error positions can be asserted without counting.
func line() int {
	_, _, l, _ := runtime.Caller(1)
	return l
}

func TestBuilderMLP(t *testing.T) {
	b := NewBuilder("mlp")
	x := b.Input("x", ir.F32, ir.Shape{8, 4}, 0)
	y := b.Input("y", ir.I32, ir.Shape{8}, 0, Limit(3))
	w := b.Param("w", ir.F32, ir.Shape{4, 3})
	bias := b.Param("b", ir.F32, ir.Shape{3}, Zeros)
	h := b.Add(b.MatMul(x, w), bias)
	loss := b.Named("loss").ReduceMean(b.SparseCrossEntropy(h, y), 0)
	b.Output(loss)
	g, err := b.Build()
	require.NoError(t, err)
	require.NoError(t, ir.Verify(g))
	assert.Equal(t, `graph mlp
input x: f32[8,4] batch=0
input y: i32[8] batch=0 limit=3
param w: f32[4,3]
param b: f32[3] init="zeros"
matmul = matmul x, w
add = add matmul, b
sparse_cross_entropy = sparse_cross_entropy add, y
loss = reduce_mean sparse_cross_entropy axes=[0]
output loss
`, g.String())
	assert.Equal(t, ir.Shape{8, 3}, h.Shape())
	assert.Equal(t, ir.F32, loss.DType())
	assert.Zero(t, loss.Shape().Rank())
	assert.Equal(t, "loss", loss.Name())
	assert.Equal(t, 3, h.Dim(-1))
	assert.Equal(t, 0, h.Dim(5))
}

func TestBuilderNames(t *testing.T) {
	b := NewBuilder("names")
	x := b.Input("x", ir.F32, ir.Shape{2, 2}, 0)
	l3 := b.Scope("l3")
	attn := l3.Scope("attn")
	cases := []struct {
		v    Value
		want string
	}{
		{b.Relu(x), "relu"},
		{b.Relu(x), "relu.1"},
		{b.Relu(x), "relu.2"},
		{l3.Relu(x), "l3.relu"},
		{attn.Relu(x), "l3.attn.relu"},
		{attn.Named("q").Relu(x), "l3.attn.q"},
		{attn.Relu(x), "l3.attn.relu.1"},
		{attn.Param("w", ir.F32, ir.Shape{2}), "l3.attn.w"},
		{b.Named("relu.4").Relu(x), "relu.4"},
		{b.Relu(x), "relu.3"},
		{b.Relu(x), "relu.5"}, // relu.4 is taken: the counter skips it
	}
	for i, c := range cases {
		assert.Equal(t, c.want, c.v.Name(), "case %d", i)
	}
	b.Output(x)
	_, err := b.Build()
	require.NoError(t, err)
}

// opCalls builds one instance of every non-leaf op and every leaf, keyed by the op.
func opCalls(b *Builder) map[ir.Op]Value {
	x := b.Input("x", ir.F32, ir.Shape{2, 3}, 0)
	ids := b.Input("ids", ir.I32, ir.Shape{2}, 0, Limit(3))
	img := b.Input("img", ir.F32, ir.Shape{2, 3, 6, 6}, 0)
	m := b.Param("m", ir.F32, ir.Shape{3, 3})
	f := b.Param("f", ir.F32, ir.Shape{4, 3, 3, 3})
	g := b.Param("g", ir.F32, ir.Shape{3}, Ones)
	st := b.State("s", ir.F32, ir.Shape{3})
	c := b.Lt(x, x)
	conv := b.Conv2D(img, f, []int{1, 1}, []int{1, 1})
	pool := b.MaxPool(img, []int{2, 2}, []int{2, 2}, []int{0, 0})
	avg := b.AvgPool(img, []int{2, 2}, []int{2, 2}, []int{0, 0})
	return map[ir.Op]Value{
		ir.OpInput: x, ir.OpParam: m, ir.OpState: st,
		ir.OpConstant: b.Constant(0.5, ir.F32, ir.Shape{2, 3}), ir.OpIota: b.Iota(ir.I32, ir.Shape{2, 3}, 1),
		ir.OpAdd: b.Add(x, x), ir.OpSub: b.Sub(x, x), ir.OpMul: b.Mul(x, x), ir.OpDiv: b.Div(x, x), ir.OpMax: b.Max(x, x),
		ir.OpEq: b.Eq(x, x), ir.OpNe: b.Ne(x, x), ir.OpLt: c, ir.OpLe: b.Le(x, x), ir.OpGt: b.Gt(x, x), ir.OpGe: b.Ge(x, x),
		ir.OpWhere: b.Where(c, x, x), ir.OpNeg: b.Neg(x), ir.OpExp: b.Exp(x), ir.OpLog: b.Log(x), ir.OpTanh: b.Tanh(x),
		ir.OpRelu: b.Relu(x), ir.OpGelu: b.Gelu(x), ir.OpSigmoid: b.Sigmoid(x), ir.OpSqrt: b.Sqrt(x), ir.OpRsqrt: b.Rsqrt(x),
		ir.OpCast: b.Cast(x, ir.F16), ir.OpDropout: b.Dropout(x, 0.1, 7),
		ir.OpMatMul: b.MatMul(x, m), ir.OpEinsum: b.Einsum("ab,bc->ac", x, m),
		ir.OpReduceSum: b.ReduceSum(x, 1), ir.OpReduceMax: b.ReduceMax(x, 0, 1), ir.OpReduceMean: b.ReduceMean(x, 0),
		ir.OpSoftmax: b.Softmax(x, 1), ir.OpLogSoftmax: b.LogSoftmax(x, 1), ir.OpCumsum: b.Cumsum(x, 0),
		ir.OpLayerNorm: b.LayerNorm(x, g, g, 1e-6), ir.OpBatchNorm: b.BatchNorm(x, g, g, 1e-5),
		ir.OpReshape: b.Reshape(x, ir.Shape{3, 2}), ir.OpTranspose: b.Transpose(x, 1, 0),
		ir.OpBroadcast: b.Broadcast(g, []int{1}, ir.Shape{2, 3}), ir.OpSlice: b.Slice(x, []int{0, 1}, []int{2, 3}),
		ir.OpConcat: b.Concat(0, x, x), ir.OpGather: b.Gather(m, ids), ir.OpScatterAdd: b.ScatterAdd(ids, x, 5),
		ir.OpSparseCrossEntropy: b.SparseCrossEntropy(x, ids),
		ir.OpConv2D:             conv,
		ir.OpConv2DInputGrad:    b.Conv2DInputGrad(conv, f, []int{1, 1}, []int{1, 1}, ir.Shape{2, 3, 6, 6}),
		ir.OpConv2DFilterGrad:   b.Conv2DFilterGrad(img, conv, []int{1, 1}, []int{1, 1}, []int{3, 3}),
		ir.OpMaxPool:            pool,
		ir.OpMaxPoolGrad:        b.MaxPoolGrad(img, pool, []int{2, 2}, []int{2, 2}, []int{0, 0}),
		ir.OpAvgPool:            avg,
		ir.OpAvgPoolGrad:        b.AvgPoolGrad(avg, []int{2, 2}, []int{2, 2}, []int{0, 0}, ir.Shape{2, 3, 6, 6}),
	}
}

func TestBuilderCoversEveryOp(t *testing.T) {
	b := NewBuilder("all")
	vals := opCalls(b)
	require.NoError(t, b.Err())
	for _, op := range ir.AllOps() {
		v, ok := vals[op]
		if assert.True(t, ok, "no builder call for op %s", op) {
			assert.Equal(t, op, b.Graph().Value(v.ID()).Op, "op %s", op)
		}
	}
	b.Output(vals[ir.OpReduceMax])
	g, err := b.Build()
	require.NoError(t, err)
	require.NoError(t, ir.Verify(g))
}

func TestBuilderErrors(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	cases := []struct {
		name string
		// build makes the mistake and returns the line it expects the error at.
		build func(b *Builder) int
		want  string
	}{
		{"shape", func(b *Builder) int {
			x := b.Input("x", ir.F32, ir.Shape{8, 512}, 0)
			w := b.Param("w2", ir.F32, ir.Shape{1024, 256})
			l := line() + 1
			b.MatMul(x, w)
			return l
		}, "matmul: inner dims differ: x is f32[8,512] but w2 is f32[1024,256]"},
		{"attribute", func(b *Builder) int {
			l := line() + 1
			b.Param("w", ir.F32, ir.Shape{2}, Limit(4))
			return l
		}, "param: unknown attribute limit (it takes type, init)"},
		{"duplicate", func(b *Builder) int {
			b.Param("w", ir.F32, ir.Shape{2})
			l := line() + 1
			b.Param("w", ir.F32, ir.Shape{2})
			return l
		}, "w is defined twice"},
		{"block 0", func(b *Builder) int {
			l := line() + 1
			b.Block(0).Param("w", ir.F32, ir.Shape{2})
			return l
		}, "block 0 is out of range: blocks are numbered from 1"},
		{"zero value", func(b *Builder) int {
			l := line() + 1
			b.Relu(Value{})
			return l
		}, "relu: operand 0 is the zero Value, want a value made by this builder"},
		{"other builder", func(b *Builder) int {
			x := NewBuilder("other").Input("x", ir.F32, ir.Shape{2}, 0)
			l := line() + 1
			b.Relu(x)
			return l
		}, "relu: operand 0 was made by another builder"},
		{"bad name", func(b *Builder) int {
			l := line() + 1
			b.Input("2x", ir.F32, ir.Shape{2}, 0)
			return l
		}, `"2x" is not a valid name`},
		{"update type", func(b *Builder) int {
			w := b.Param("w", ir.F32, ir.Shape{2})
			x := b.Input("x", ir.F32, ir.Shape{3}, 0)
			l := line() + 1
			b.Update(w, x)
			return l
		}, "update of w: w is f32[2] but x is f32[3]"},
		{"update target", func(b *Builder) int {
			x := b.Input("x", ir.F32, ir.Shape{3}, 0)
			l := line() + 1
			b.Update(x, x)
			return l
		}, "update target x must be a param or state, is input"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := NewBuilder("bad")
			l := c.build(b)
			// Later calls are no-ops and return invalid values.
			v := b.Relu(b.Input("later", ir.F32, ir.Shape{2}, 0))
			assert.False(t, v.Valid())
			assert.Equal(t, ir.Type{}, v.Type())
			b.Output(v)
			g, err := b.Build()
			require.Error(t, err)
			assert.Nil(t, g)
			prefix := file + ":" + strconv.Itoa(l) + ":1: "
			assert.True(t, strings.HasPrefix(err.Error(), prefix), "error %q does not start with %q", err, prefix)
			assert.Contains(t, err.Error(), c.want)
			var ie *ir.Error
			require.ErrorAs(t, err, &ie)
			assert.Equal(t, filepath.Base(file), filepath.Base(ie.Pos.File))
		})
	}
}

func TestBuilderNoOutputAndAfterBuild(t *testing.T) {
	b := NewBuilder("empty")
	x := b.Input("x", ir.F32, ir.Shape{2}, 0)
	_, err := b.Build()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "graph empty has no output")

	b = NewBuilder("done")
	x = b.Input("x", ir.F32, ir.Shape{2}, 0)
	b.Output(x)
	g, err := b.Build()
	require.NoError(t, err)
	require.NotNil(t, g)
	b.Relu(x)
	_, err = b.Build()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "relu: the builder of done is finished")
	assert.Len(t, g.Values, 1, "a call after Build must not change the built graph")
}

func TestBuilderValuePositions(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	b := NewBuilder("pos")
	l := line() + 1
	x := b.Input("x", ir.F32, ir.Shape{2}, 0)
	assert.Equal(t, ir.Pos{File: file, Line: l, Col: 1}, b.Graph().Value(x.ID()).Pos)
}

// TestBuilderParseRoundTrip checks that the builder and the parser make the same IR: the
// printed builder graph holding every op parses back and prints to the identical text.
func TestBuilderParseRoundTrip(t *testing.T) {
	b := NewBuilder("all")
	vals := opCalls(b)
	b.Output(vals[ir.OpReduceMax])
	b.Output(vals[ir.OpAvgPoolGrad])
	b.Update(vals[ir.OpParam], b.Sub(vals[ir.OpParam], vals[ir.OpParam]))
	b.Update(vals[ir.OpState], b.Named("s.next").Add(vals[ir.OpState], vals[ir.OpState]))
	g, err := b.Build()
	require.NoError(t, err)
	text := g.String()
	parsed, err := Parse("all.ir", []byte(text))
	require.NoError(t, err)
	assert.Equal(t, text, parsed.String())
	require.Len(t, parsed.Updates, 2)
	assert.Equal(t, "s.next", parsed.Value(parsed.Updates[1].Value).Name)
}

// TestBuilderBlocks: a Block builder marks what it and its scopes make, not what the
// builder it came from makes, and the marks round-trip through the text.
func TestBuilderBlocks(t *testing.T) {
	b := NewBuilder("blocks")
	x := b.Input("x", ir.F32, ir.Shape{2, 4}, 0)
	for i := range 2 {
		s := b.Scope(fmt.Sprintf("l%d", i)).Block(i + 1)
		x = s.Scope("fc").Named("tanh").Tanh(s.MatMul(x, s.Param("w", ir.F32, ir.Shape{4, 4})))
	}
	b.Output(b.Named("loss").ReduceSum(x, 0, 1))
	g, err := b.Build()
	require.NoError(t, err)
	want := map[string]ir.Block{"x": ir.NoBlock, "l0.w": 1, "l0.matmul": 1, "l0.fc.tanh": 1, "l1.w": 2, "l1.matmul": 2,
		"l1.fc.tanh": 2, "loss": ir.NoBlock}
	for name, blk := range want {
		id, ok := g.Lookup(name)
		require.True(t, ok, name)
		assert.Equal(t, blk, g.Value(id).Block, name)
	}
	text := g.String()
	assert.Contains(t, text, "l1.fc.tanh = tanh l1.matmul block=2\n")
	parsed, err := Parse("blocks.ir", []byte(text))
	require.NoError(t, err)
	pb, _ := parsed.Blocks()
	gb, _ := g.Blocks()
	assert.Equal(t, gb, pb)
	assert.Equal(t, text, parsed.String())
}
