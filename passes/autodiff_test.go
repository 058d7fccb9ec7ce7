package passes

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
)

// gradCase is one row of the gradient test: build puts the op under test into a tiny graph
// and returns its result; the harness adds the loss.
type gradCase struct {
	name  string
	op    ir.Op
	tol   float64 // relative error allowed; 0 means 1e-6
	build func(c *caseGraph) ir.ValueID
}

func at(kv ...any) ir.Attrs {
	a := ir.Attrs{}
	for i := 0; i < len(kv); i += 2 {
		a = a.With(kv[i].(string), kv[i+1])
	}
	return a
}

// binary is a case of a broadcasting binary op on operands of shapes sa and sb.
func binary(name string, op ir.Op, da, db dist, sa, sb []int) gradCase {
	return gradCase{name: name, op: op, build: func(c *caseGraph) ir.ValueID {
		return c.op(op, nil, c.param("a", da, sa...), c.param("b", db, sb...))
	}}
}

func unary(op ir.Op, d dist) gradCase {
	return gradCase{name: op.String(), op: op, build: func(c *caseGraph) ir.ValueID {
		return c.op(op, nil, c.param("x", d, 3, 4))
	}}
}

func onX(name string, op ir.Op, a ir.Attrs, d dist, dims ...int) gradCase {
	return gradCase{name: name, op: op, build: func(c *caseGraph) ir.ValueID {
		return c.op(op, a, c.param("x", d, dims...))
	}}
}

var gradCases = []gradCase{
	binary("add", ir.OpAdd, normal, normal, []int{2, 3}, []int{2, 3}),
	binary("add_bcast_row", ir.OpAdd, normal, normal, []int{2, 3}, []int{3}),
	binary("add_bcast_both", ir.OpAdd, normal, normal, []int{2, 1}, []int{1, 3}),
	binary("sub_bcast", ir.OpSub, normal, normal, []int{3}, []int{2, 3}),
	binary("mul_bcast_scalar", ir.OpMul, normal, normal, []int{2, 3}, nil),
	binary("mul_self_shape", ir.OpMul, normal, normal, []int{2, 1, 4}, []int{3, 1}),
	binary("div_bcast", ir.OpDiv, normal, positive, []int{2, 3}, []int{2, 1}),
	binary("max", ir.OpMax, normal, normal, []int{3, 4}, []int{3, 4}),
	binary("max_bcast", ir.OpMax, normal, normal, []int{3, 4}, []int{4}),
	{name: "where_bcast", op: ir.OpWhere, build: func(c *caseGraph) ir.ValueID {
		zero := c.op(ir.OpConstant, at("value", 0.0, "type", ir.Type{DType: ir.F64}))
		cond := c.op(ir.OpGt, nil, c.input("c", normal, 2, 3), zero)
		return c.op(ir.OpWhere, nil, cond, c.param("a", normal, 2, 3), c.param("b", normal, 3))
	}},
	unary(ir.OpNeg, normal),
	unary(ir.OpExp, normal),
	unary(ir.OpLog, positive),
	unary(ir.OpTanh, normal),
	unary(ir.OpRelu, normal),
	unary(ir.OpGelu, normal),
	unary(ir.OpSigmoid, normal),
	unary(ir.OpSqrt, positive),
	unary(ir.OpRsqrt, positive),
	onX("cast_same", ir.OpCast, at("to", ir.F64), normal, 2, 3),
	// Through f32 the loss is only good to ~1e-7 relative, so the difference quotient
	// (h = 1e-5) to ~1e-2.
	{name: "cast_f32", op: ir.OpCast, tol: 5e-2, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpCast, at("to", ir.F32), c.param("x", normal, 2, 3))
	}},
	onX("dropout", ir.OpDropout, at("rate", 0.4, "seed", 11), normal, 4, 5),
	binary("matmul", ir.OpMatMul, normal, normal, []int{3, 4}, []int{4, 2}),
	{name: "einsum_batched", op: ir.OpEinsum, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpEinsum, at("spec", "bij,bjk->bik"), c.param("a", normal, 2, 3, 4), c.param("b", normal, 2, 4, 2))
	}},
	{name: "einsum_sum_away", op: ir.OpEinsum, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpEinsum, at("spec", "ij,k->ik"), c.param("a", normal, 3, 4), c.param("b", normal, 2))
	}},
	{name: "einsum_three", op: ir.OpEinsum, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpEinsum, at("spec", "ij,jk,k->ik"), c.param("a", normal, 2, 3), c.param("b", normal, 3, 4), c.param("c", normal, 4))
	}},
	onX("einsum_transpose", ir.OpEinsum, at("spec", "ij->ji"), normal, 2, 3),
	onX("reduce_sum", ir.OpReduceSum, at("axes", []int{0, 2}), normal, 2, 3, 4),
	onX("reduce_sum_all", ir.OpReduceSum, at("axes", []int{0, 1}), normal, 2, 3),
	onX("reduce_mean", ir.OpReduceMean, at("axes", []int{1}), normal, 2, 3, 4),
	onX("reduce_max", ir.OpReduceMax, at("axes", []int{1}), normal, 3, 5),
	onX("reduce_max_outer", ir.OpReduceMax, at("axes", []int{0, 2}), normal, 3, 2, 2),
	onX("softmax", ir.OpSoftmax, at("axis", 1), normal, 3, 4),
	onX("softmax_outer", ir.OpSoftmax, at("axis", 0), normal, 3, 4),
	onX("log_softmax", ir.OpLogSoftmax, at("axis", 1), normal, 3, 4),
	onX("cumsum", ir.OpCumsum, at("axis", 1), normal, 3, 5),
	onX("cumsum_outer", ir.OpCumsum, at("axis", 0), normal, 4, 2),
	{name: "layer_norm", op: ir.OpLayerNorm, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpLayerNorm, nil, c.param("x", normal, 3, 5), c.param("gamma", normal, 5), c.param("beta", normal, 5))
	}},
	{name: "layer_norm_3d", op: ir.OpLayerNorm, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpLayerNorm, at("eps", 1e-3), c.param("x", normal, 2, 2, 4), c.param("gamma", normal, 4), c.param("beta", normal, 4))
	}},
	{name: "batch_norm_2d", op: ir.OpBatchNorm, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpBatchNorm, nil, c.param("x", normal, 5, 3), c.param("gamma", normal, 3), c.param("beta", normal, 3))
	}},
	{name: "batch_norm_4d", op: ir.OpBatchNorm, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpBatchNorm, nil, c.param("x", normal, 2, 3, 2, 2), c.param("gamma", normal, 3), c.param("beta", normal, 3))
	}},
	// Statistics per group of rows of dim 0 (per micro-batch; ghost batch norm).
	{name: "batch_norm_2d_group", op: ir.OpBatchNorm, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpBatchNorm, at("group", 3), c.param("x", normal, 6, 2), c.param("gamma", normal, 2), c.param("beta", normal, 2))
	}},
	{name: "batch_norm_4d_group", op: ir.OpBatchNorm, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpBatchNorm, at("group", 2), c.param("x", normal, 4, 3, 2, 2), c.param("gamma", normal, 3), c.param("beta", normal, 3))
	}},
	onX("reshape", ir.OpReshape, at("shape", []int{3, 4}), normal, 2, 6),
	onX("transpose", ir.OpTranspose, at("perm", []int{2, 0, 1}), normal, 2, 3, 4),
	onX("broadcast", ir.OpBroadcast, at("dims", []int{1, 2}, "shape", []int{2, 3, 4}), normal, 3, 1),
	onX("broadcast_scalar", ir.OpBroadcast, at("dims", []int{}, "shape", []int{2, 3}), normal),
	onX("slice", ir.OpSlice, at("start", []int{1, 0}, "limit", []int{3, 2}), normal, 4, 3),
	onX("slice_inner", ir.OpSlice, at("start", []int{0, 1, 1}, "limit", []int{2, 3, 2}), normal, 2, 4, 3),
	{name: "concat", op: ir.OpConcat, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpConcat, at("axis", 1), c.param("a", normal, 2, 1), c.param("b", normal, 2, 3), c.param("c", normal, 2, 2))
	}},
	{name: "gather", op: ir.OpGather, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpGather, nil, c.param("table", normal, 5, 3), c.ints("ids", 5, 2, 3))
	}},
	{name: "scatter_add", op: ir.OpScatterAdd, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpScatterAdd, at("rows", 3), c.ints("ids", 3, 5), c.param("upd", normal, 5, 2))
	}},
	{name: "sparse_cross_entropy", op: ir.OpSparseCrossEntropy, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpSparseCrossEntropy, nil, c.param("logits", normal, 3, 5), c.ints("labels", 5, 3))
	}},
	{name: "sparse_cross_entropy_3d", op: ir.OpSparseCrossEntropy, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpSparseCrossEntropy, nil, c.param("logits", normal, 2, 2, 4), c.ints("labels", 4, 2, 2))
	}},
	{name: "conv2d", op: ir.OpConv2D, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpConv2D, nil, c.param("x", normal, 2, 2, 4, 4), c.param("f", normal, 3, 2, 3, 3))
	}},
	{name: "conv2d_stride_pad", op: ir.OpConv2D, build: func(c *caseGraph) ir.ValueID {
		return c.op(ir.OpConv2D, at("stride", []int{2, 2}, "pad", []int{1, 1}), c.param("x", normal, 1, 2, 5, 5), c.param("f", normal, 2, 2, 3, 3))
	}},
	{name: "conv2d_input_grad", op: ir.OpConv2DInputGrad, build: func(c *caseGraph) ir.ValueID {
		a := at("stride", []int{2, 2}, "pad", []int{1, 1}, "shape", []int{1, 2, 5, 5})
		return c.op(ir.OpConv2DInputGrad, a, c.param("dy", normal, 1, 2, 3, 3), c.param("f", normal, 2, 2, 3, 3))
	}},
	{name: "conv2d_filter_grad", op: ir.OpConv2DFilterGrad, build: func(c *caseGraph) ir.ValueID {
		a := at("stride", []int{2, 2}, "pad", []int{1, 1}, "kernel", []int{3, 3})
		return c.op(ir.OpConv2DFilterGrad, a, c.param("x", normal, 1, 2, 5, 5), c.param("dy", normal, 1, 2, 3, 3))
	}},
	onX("max_pool", ir.OpMaxPool, at("window", []int{2, 2}, "stride", []int{2, 2}), normal, 1, 2, 4, 4),
	onX("max_pool_overlap", ir.OpMaxPool, at("window", []int{3, 3}, "stride", []int{2, 2}, "pad", []int{1, 1}), normal, 1, 1, 5, 5),
	onX("avg_pool", ir.OpAvgPool, at("window", []int{2, 2}, "stride", []int{2, 2}), normal, 1, 2, 4, 4),
	onX("avg_pool_overlap", ir.OpAvgPool, at("window", []int{3, 3}, "stride", []int{2, 2}, "pad", []int{1, 1}), normal, 1, 1, 5, 5),
	onX("avg_pool_grad", ir.OpAvgPoolGrad, at("window", []int{3, 3}, "stride", []int{2, 2}, "pad", []int{1, 1}, "shape", []int{1, 1, 5, 5}), normal, 1, 1, 3, 3),
}

// noGradient lists the ops that deliberately have no gradient rule. With the
// gradient table, it must cover the whole ir op table: a new op has to be put in one or
// the other.
var noGradient = map[ir.Op]string{
	ir.OpParam: "leaf", ir.OpInput: "leaf", ir.OpState: "leaf", ir.OpConstant: "leaf", ir.OpIota: "integer",
	ir.OpEq: "bool result", ir.OpNe: "bool result", ir.OpLt: "bool result", ir.OpLe: "bool result",
	ir.OpGt: "bool result", ir.OpGe: "bool result",
	ir.OpMaxPoolGrad: "no double backward through max pooling",
}

func TestEveryOpHasAGradientCase(t *testing.T) {
	covered := map[ir.Op]bool{}
	for _, gc := range gradCases {
		covered[gc.op] = true
	}
	for _, op := range ir.AllOps() {
		_, nd := noGradient[op]
		switch {
		case Differentiable(op) && nd:
			t.Errorf("%s has a gradient rule but is listed as not differentiable", op)
		case Differentiable(op) && !covered[op]:
			t.Errorf("%s has a gradient rule but no case in gradCases", op)
		case !Differentiable(op) && !nd:
			t.Errorf("%s has no gradient rule: add one (and a case to gradCases) or list it in noGradient", op)
		}
	}
}

func TestGradMatchesFiniteDifferences(t *testing.T) {
	for _, gc := range gradCases {
		t.Run(gc.name, func(t *testing.T) {
			c := newCaseGraph(t, gc.name)
			y := gc.build(c)
			require.Equal(t, gc.op, c.g.Values[y].Op)
			loss := c.finish(y)
			require.NoError(t, ir.Verify(c.g))

			gg, grads, err := Grad(c.g, loss, c.params)
			require.NoError(t, err)
			require.NoError(t, ir.Verify(gg))
			r, err := interp.Run(context.Background(), withOutputs(gg, grads), c.feeds)
			require.NoError(t, err)

			tol := gc.tol
			if tol == 0 {
				tol = 1e-6
			}
			for k, p := range c.params {
				name := c.g.Values[p].Name
				assert.Equal(t, "grad."+name, gg.Values[grads[k]].Name)
				got := r.Outputs[1+k].Float64s()
				want := numericGrad(t, c.g, c.feeds, name, 1e-5)
				require.Greater(t, norm(want), 1e-6, "d loss / d %s is zero: the case tests nothing", name)
				assert.Less(t, relErr(got, want), tol, "d loss / d %s\n got %v\nwant %v", name, got, want)
			}
		})
	}
}

// withOutputs returns g with the grads added as outputs after the loss.
func withOutputs(g *ir.Graph, grads []ir.ValueID) *ir.Graph {
	g = g.Clone()
	for _, gr := range grads {
		g.AddOutput(gr, ir.Pos{})
	}
	return g
}

// The rules composed on whole models: the tiny zoo models, turned to f64, against central
// differences at a few sampled elements of every param. This is what catches a rule that is
// right alone but wrong in composition (fan-out, broadcasting inside attention, MoE routing).
func TestGradZooModelsF64(t *testing.T) {
	for _, name := range []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"} {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("..", "testdata", "models", name+".ir"))
			require.NoError(t, err)
			g, err := frontend.Parse(name+".ir", []byte(strings.ReplaceAll(string(src), "f32", "f64")))
			require.NoError(t, err)
			params := g.Leaves(ir.OpParam)
			gg, grads, err := Grad(g, g.Outputs[0].Value, params)
			require.NoError(t, err)
			require.NoError(t, ir.Verify(gg))

			feeds := interp.InitParams(g, 3)
			inputs, err := interp.GenerateInputs(g, 4)
			require.NoError(t, err)
			for k, v := range inputs {
				feeds[k] = v
			}
			r, err := interp.Run(context.Background(), withOutputs(gg, grads), feeds)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(1, 2))
			var got, want []float64
			for k, p := range params {
				pname := g.Value(p).Name
				i := rng.IntN(feeds[pname].Len())
				got = append(got, r.Outputs[1+k].At(i))
				want = append(want, numericAt(t, g, feeds, pname, i, 1e-5))
			}
			require.Greater(t, norm(want), 1e-6)
			assert.Less(t, relErr(got, want), 1e-6, "\n got %v\nwant %v", got, want)
		})
	}
}

// numericAt is the central difference of the loss in element i of feed p.
func numericAt(t *testing.T, g *ir.Graph, feeds interp.Feeds, p string, i int, h float64) float64 {
	orig := feeds[p]
	x := orig.Clone()
	feeds[p] = x
	defer func() { feeds[p] = orig }()
	x.Set(i, orig.At(i)+h)
	up := runLoss(t, g, feeds)
	x.Set(i, orig.At(i)-h)
	return (up - runLoss(t, g, feeds)) / (2 * h)
}
