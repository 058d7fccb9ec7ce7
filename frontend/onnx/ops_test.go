package onnx_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/autopar/autopar/frontend/onnx"
	"github.com/autopar/autopar/frontend/onnx/onnxpb"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

func floats(name string, dims []int64, v ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: v}
}

func int64s(name string, dims []int64, v ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), Dims: dims, DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: v}
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// opModel is y = nodes(x) with x of shape xdims and the given initializers.
func opModel(xdims []int64, inits []*onnxpb.TensorProto, nodes ...*onnxpb.NodeProto) []byte {
	m := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(tinyModel(17, xdims, nodes...), m); err != nil {
		panic(err)
	}
	m.Graph.Initializer = inits
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// runOp imports the model with a loss over its output y, runs it on x and returns y.
func runOp(t *testing.T, data []byte, x *kernels.Tensor) *kernels.Tensor {
	t.Helper()
	m, err := onnx.Import("op.onnx", data, onnx.Options{Loss: "cross-entropy", Labels: "labels"})
	require.NoError(t, err)
	feeds, err := interp.GenerateInputs(m.Graph, 1)
	require.NoError(t, err)
	for n, w := range m.Weights {
		feeds[n] = w
	}
	feeds[m.Inputs["x"]] = x
	res, err := interp.RunKeep(context.Background(), m.Graph, feeds)
	require.NoError(t, err)
	id, ok := m.Graph.Lookup(m.Outputs["y"])
	require.True(t, ok)
	return res.Values[id]
}

func seq(shape ir.Shape) *kernels.Tensor {
	t := kernels.New(ir.Type{DType: ir.F32, Shape: shape})
	for i := range t.Len() {
		t.Set(i, float64(i)*0.25-1)
	}
	return t
}

func TestOpLowerings(t *testing.T) {
	x := seq(ir.Shape{2, 3})
	t.Run("gather along axis 1", func(t *testing.T) {
		n := nd("g", "Gather", []string{"x", "idx"}, "y")
		n.Attribute = []*onnxpb.AttributeProto{attrInt("axis", 1)}
		y := runOp(t, opModel([]int64{2, 3}, []*onnxpb.TensorProto{int64s("idx", []int64{2}, 2, -3)}, n), x)
		require.Equal(t, ir.Shape{2, 2}, y.Type.Shape)
		for i := range 2 {
			require.Equal(t, x.At(3*i+2), y.At(2*i))
			require.Equal(t, x.At(3*i), y.At(2*i+1))
		}
	})
	t.Run("gelu expansion, half first", func(t *testing.T) {
		y := runOp(t, opModel([]int64{2, 3}, []*onnxpb.TensorProto{floats("h", nil, 0.5), floats("r", nil, 0.70710678), floats("one", nil, 1)},
			nd("a", "Mul", []string{"x", "h"}, "xh"), nd("b", "Mul", []string{"x", "r"}, "xr"), nd("c", "Erf", []string{"xr"}, "e"),
			nd("d", "Add", []string{"one", "e"}, "e1"), nd("f", "Mul", []string{"xh", "e1"}, "y")), x)
		for i := range x.Len() {
			v := x.At(i)
			require.InDelta(t, v*0.5*(1+math.Erf(v/math.Sqrt2)), y.At(i), 1e-6)
		}
	})
	t.Run("gemm transA alpha beta", func(t *testing.T) {
		n := nd("g", "Gemm", []string{"x", "w", "c"}, "y")
		n.Attribute = []*onnxpb.AttributeProto{attrInt("transA", 1),
			{Name: proto.String("alpha"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(2)},
			{Name: proto.String("beta"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(-1)}}
		y := runOp(t, opModel([]int64{2, 3}, []*onnxpb.TensorProto{floats("w", []int64{2, 2}, 1, 2, 3, 4), floats("c", []int64{2}, 10, 20)}, n), x)
		require.Equal(t, ir.Shape{3, 2}, y.Type.Shape) // x' [3,2] · w [2,2]
		for m := range 3 {
			for k := range 2 {
				want := -[]float64{10, 20}[k]
				for j := range 2 {
					want += 2 * x.At(3*j+m) * []float64{1, 2, 3, 4}[2*j+k]
				}
				require.InDelta(t, want, y.At(2*m+k), 1e-5)
			}
		}
	})
	t.Run("expand then reduce sum keepdims", func(t *testing.T) {
		e := nd("e", "Expand", []string{"x", "shape"}, "big")
		r := nd("r", "ReduceSum", []string{"big", "axes"}, "s")
		sq := nd("q", "Squeeze", []string{"s", "axes"}, "y")
		y := runOp(t, opModel([]int64{2, 3}, []*onnxpb.TensorProto{int64s("shape", []int64{3}, 4, 1, 1), int64s("axes", []int64{1}, 0)}, e, r, sq), x)
		require.Equal(t, ir.Shape{2, 3}, y.Type.Shape)
		for i := range x.Len() {
			require.InDelta(t, 4*x.At(i), y.At(i), 1e-6)
		}
	})
	t.Run("einsum implicit output", func(t *testing.T) {
		n := nd("e", "Einsum", []string{"x", "w"}, "y")
		n.Attribute = []*onnxpb.AttributeProto{{Name: proto.String("equation"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("Ij,jK")}}
		y := runOp(t, opModel([]int64{2, 3}, []*onnxpb.TensorProto{floats("w", []int64{3, 1}, 1, 1, 1)}, n), x)
		require.Equal(t, ir.Shape{2, 1}, y.Type.Shape)
		require.InDelta(t, x.At(0)+x.At(1)+x.At(2), y.At(0), 1e-6)
	})
}
