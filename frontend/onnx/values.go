package onnx

import (
	"fmt"
	"strings"

	"github.com/autopar/autopar/frontend/onnx/onnxpb"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// val is what an ONNX tensor name stands for during the import: a value of the graph (id),
// a tensor known at import time (c), or both. A float initializer (param) is known but
// becomes a param of the graph the first time an op needs it at run time.
type val struct {
	id    ir.ValueID
	c     *kernels.Tensor
	param bool
	onnx  string
}

// importer turns ONNX nodes into ops of g.
type importer struct {
	path    string
	g       *ir.Graph
	opset   int64
	vals    map[string]*val
	weights map[string]*kernels.Tensor
	limits  map[ir.ValueID]int
	// folding marks a scratch importer that lowers one node whose inputs are all known, to
	// run it at import time: it never folds itself, and its inputs are graph inputs.
	folding bool
	cur     *node
}

func newImporter(path string, g *ir.Graph, opset int64) *importer {
	return &importer{path: path, g: g, opset: opset, vals: map[string]*val{},
		weights: map[string]*kernels.Tensor{}, limits: map[ir.ValueID]int{}}
}

// sizeLimit bounds the elements of a shape an op makes: a folded tensor is allocated now, so
// it is held to maxBuilt; a graph value only needs its count to fit an int64.
func (im *importer) sizeLimit() int64 {
	if im.folding {
		return maxBuilt
	}
	return 1 << 40
}

func (im *importer) pos() ir.Pos { return ir.Pos{File: im.path} }

// sanitize turns an ONNX name ("/blocks.0/attn/MatMul_output_0", "onnx::MatMul_238") into
// an IR name ("blocks.0.attn.MatMul", "onnx_MatMul_238").
func sanitize(s string) string {
	s = strings.TrimSuffix(s, "_output_0")
	s = strings.ReplaceAll(s, "::", "_")
	var b strings.Builder
	for _, r := range strings.TrimLeft(s, "/.") {
		switch {
		case r == '/':
			b.WriteByte('.')
		case r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || !(out[0] == '_' || out[0] >= 'a' && out[0] <= 'z' || out[0] >= 'A' && out[0] <= 'Z') {
		out = "v" + out
	}
	return out
}

// fresh returns an unused IR name for the ONNX name s.
func (im *importer) fresh(s string) string { return im.g.FreshName(sanitize(s)) }

// emit appends one op; its errors become the current node's.
func (im *importer) emit(op ir.Op, name string, args []ir.ValueID, at ir.Attrs) (ir.ValueID, error) {
	id, err := im.g.Append(op, im.g.FreshName(name), args, at, im.pos())
	if e, ok := err.(*ir.Error); ok {
		return ir.NoValue, fmt.Errorf("%s", e.Msg)
	} else if err != nil {
		return ir.NoValue, err
	}
	return id, nil
}

// scalar appends a constant of the given dtype and shape filled with x.
func (im *importer) scalar(name string, x float64, dt ir.DType, shape ir.Shape) (ir.ValueID, error) {
	return im.emit(ir.OpConstant, name, nil, ir.Attrs{}.With("value", x).With("type", ir.Type{DType: dt, Shape: shape.Clone()}))
}

// rt returns v as a value of the graph, declaring a param or building a known tensor from
// ops the first time.
func (im *importer) rt(v *val) (ir.ValueID, error) {
	if v.id != ir.NoValue {
		return v.id, nil
	}
	if v.param {
		name := im.paramName(v.onnx)
		id, err := im.g.Declare(ir.OpParam, name, v.c.Type, -1, im.pos())
		if err != nil {
			return ir.NoValue, err
		}
		// An initializer of all zeros or all ones (biases, norms' scales) says so in the
		// .ir, so the graph initializes sensibly without its weights file too.
		if u, ok := uniform(v.c); ok && (u == 0 || u == 1) {
			init := map[float64]string{0: "zeros", 1: "ones"}[u]
			im.g.Values[id].Attrs = im.g.Values[id].Attrs.With("init", init)
		}
		im.weights[name] = v.c
		v.id = id
		return id, nil
	}
	id, err := im.materialize(v)
	if err != nil {
		return ir.NoValue, err
	}
	v.id = id
	return id, nil
}

// paramName names a param after its initializer, or, for the exporter's anonymous
// "onnx::MatMul_238" (a weight it transposed), after the layer of the node using it:
// blocks.0.qkv.weight.
func (im *importer) paramName(onnxName string) string {
	if strings.HasPrefix(onnxName, "onnx::") && im.cur != nil {
		node := strings.TrimLeft(im.cur.p.GetName(), "/")
		if i := strings.LastIndex(node, "/"); i > 0 {
			return im.g.FreshName(sanitize(node[:i]) + ".weight")
		}
	}
	return im.fresh(onnxName)
}

// constOf returns a lookup of the tensors known before any node is lowered (Constant nodes
// and initializers), for the pattern matchers.
func (im *importer) constOf(gp *onnxpb.GraphProto) func(string) *kernels.Tensor {
	known := map[string]*onnxpb.TensorProto{}
	for _, tp := range gp.GetInitializer() {
		known[tp.GetName()] = tp
	}
	for _, n := range gp.GetNode() {
		if n.GetOpType() == "Constant" && len(n.GetOutput()) == 1 {
			for _, a := range n.GetAttribute() {
				if a.GetName() == "value" && a.GetT() != nil {
					known[n.GetOutput()[0]] = a.GetT()
				}
			}
		}
	}
	return func(name string) *kernels.Tensor {
		tp, ok := known[name]
		if !ok {
			return nil
		}
		t, err := tensorOf(tp)
		if err != nil {
			return nil
		}
		return t
	}
}
