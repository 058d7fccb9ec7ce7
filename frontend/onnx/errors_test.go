package onnx_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/autopar/autopar/frontend/onnx"
	"github.com/autopar/autopar/frontend/onnx/onnxpb"
)

// tinyModel builds y = op(x) by hand with the protobuf types, for the error cases.
func tinyModel(opset int64, dims []int64, nodes ...*onnxpb.NodeProto) []byte {
	f32 := int32(onnxpb.TensorProto_FLOAT)
	var shape onnxpb.TensorShapeProto
	for _, d := range dims {
		if d < 0 {
			shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}})
			continue
		}
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	tt := &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: &onnxpb.TypeProto_Tensor{ElemType: &f32, Shape: &shape}}}
	last := nodes[len(nodes)-1].GetOutput()[0]
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph: &onnxpb.GraphProto{
			Name:   proto.String("tiny"),
			Node:   nodes,
			Input:  []*onnxpb.ValueInfoProto{{Name: proto.String("x"), Type: tt}},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String(last)}},
		},
	}
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

func nd(name, op string, in []string, out ...string) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{Name: proto.String(name), OpType: proto.String(op), Input: in, Output: out}
}

func TestImportErrors(t *testing.T) {
	gpt, err := os.ReadFile(filepath.Join(fixtures, "gpt2-tiny.onnx"))
	require.NoError(t, err)
	relu := nd("r", "Relu", []string{"x"}, "y")
	cases := []struct {
		name string
		data []byte
		opts onnx.Options
		want []string
	}{
		{"empty", nil, onnx.Options{}, []string{"m.onnx: empty file"}},
		{"truncated", gpt[:len(gpt)/3], onnx.Options{}, []string{"m.onnx: not an ONNX model", "truncated"}},
		{"not protobuf", []byte("graph mlp\ninput x: f32[2]\n"), onnx.Options{}, []string{"m.onnx: not an ONNX model"}},
		{"old opset", tinyModel(9, []int64{2, 3}, relu), onnx.Options{}, []string{"opset 9 is not supported", "13 to 18"}},
		{"symbolic batch", tinyModel(17, []int64{-1, 3}, relu), onnx.Options{}, []string{`input "x": dim 0 is symbolic ("batch")`, "--batch N"}},
		{"symbolic other dim", tinyModel(17, []int64{2, -1}, relu), onnx.Options{Batch: 4}, []string{`dim 1 is symbolic`}},
		{"inference only", tinyModel(17, []int64{2, 3}, relu), onnx.Options{}, []string{`first output "y" is f32[2,3], not a scalar loss`, "--loss cross-entropy --labels NAME"}},
		{"labels missing", tinyModel(17, []int64{2, 3}, relu), onnx.Options{Loss: "cross-entropy"}, []string{"--labels NAME is required"}},
		{"every unsupported op", tinyModel(17, []int64{2, 3},
			nd("a", "Sin", []string{"x"}, "s"), nd("b", "Relu", []string{"s"}, "r"),
			nd("c", "Erf", []string{"r"}, "e"), nd("d", "Cos", []string{"e"}, "y")),
			onnx.Options{}, []string{"3 nodes use ops autopar does not import (Cos, Erf, Sin)", `node "a": Sin`, `node "c": Erf, outside GELU`, `node "d": Cos`}},
		{"bad attribute", tinyModel(17, []int64{2, 3}, &onnxpb.NodeProto{Name: proto.String("p"), OpType: proto.String("Pow"),
			Input: []string{"x", "x"}, Output: []string{"y"}}), onnx.Options{}, []string{`node "p" (Pow): input 1 (exponent) must be known at import time`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := onnx.Import("m.onnx", tc.data, tc.opts)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			require.False(t, strings.Contains(err.Error(), "panic"))
		})
	}
}

// FuzzImportONNX feeds the importer mutated models: it must return a model or an error,
// never panic, hang or allocate without bound.
func FuzzImportONNX(f *testing.F) {
	for _, name := range []string{"mlp", "cnn-tiny", "moe-gate-tiny"} {
		data, err := os.ReadFile(filepath.Join(fixtures, name+".onnx"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(tinyModel(17, []int64{2, 3}, nd("r", "Relu", []string{"x"}, "y")))
	f.Add(tinyModel(17, []int64{-1, 3}, nd("r", "Softmax", []string{"x"}, "y")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Import("fuzz.onnx", data, onnx.Options{Batch: 2, Loss: "cross-entropy", Labels: "labels_"})
		if err == nil && m.Graph == nil {
			t.Fatal("no error and no graph")
		}
		m, err = onnx.Import("fuzz.onnx", data, onnx.Options{})
		if err == nil && m.Graph == nil {
			t.Fatal("no error and no graph")
		}
	})
}
