package onnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/proto"

	"github.com/autopar/autopar/frontend/onnx/onnxpb"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// The opsets the importer knows: the op semantics it implements are those of ONNX opsets
// 13 to 17 (torch.onnx.export's defaults from torch 1.8 to 2.x); 18 changed only the
// reductions' axes (an input instead of an attribute), which are read either way.
const (
	minOpset = 13
	maxOpset = 18
)

// maxElements bounds the dims of one tensor or input; a tensor read from the file must also
// hold that many values, and one built at import time (ConstantOfShape, Expand) is held to
// maxBuilt, so a corrupt dims list cannot ask for unbounded memory.
const (
	maxElements = 1 << 31
	maxBuilt    = 1 << 24
)

// decode parses an ONNX model and checks what the importer relies on: a graph, and the
// default-domain opset within [minOpset, maxOpset].
func decode(path string, data []byte) (*onnxpb.ModelProto, int64, error) {
	if len(data) == 0 {
		return nil, 0, fmt.Errorf("%s: empty file, not an ONNX model", path)
	}
	m := &onnxpb.ModelProto{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, m); err != nil {
		return nil, 0, fmt.Errorf("%s: not an ONNX model (protobuf decoding failed: %v); is the file truncated?", path, err)
	}
	if m.GetGraph() == nil || m.GetIrVersion() == 0 {
		return nil, 0, fmt.Errorf("%s: not an ONNX model: it has no graph or no ir_version", path)
	}
	opset := int64(-1)
	for _, o := range m.GetOpsetImport() {
		if d := o.GetDomain(); d == "" || d == "ai.onnx" {
			opset = o.GetVersion()
		}
	}
	switch {
	case opset < 0:
		return nil, 0, fmt.Errorf("%s: the model imports no default-domain (ai.onnx) opset", path)
	case opset < minOpset || opset > maxOpset:
		return nil, 0, fmt.Errorf("%s: opset %d is not supported: autopar imports opsets %d to %d (torch.onnx.export(..., opset_version=17))",
			path, opset, minOpset, maxOpset)
	}
	return m, opset, nil
}

// dtypeOf maps an ONNX element type to the IR's. Small integer types widen to i64 (masks
// stored as uint8 by some exporters); the rest have no IR type.
func dtypeOf(t int32) (ir.DType, bool) {
	switch onnxpb.TensorProto_DataType(t) {
	case onnxpb.TensorProto_FLOAT:
		return ir.F32, true
	case onnxpb.TensorProto_DOUBLE:
		return ir.F64, true
	case onnxpb.TensorProto_FLOAT16:
		return ir.F16, true
	case onnxpb.TensorProto_BFLOAT16:
		return ir.BF16, true
	case onnxpb.TensorProto_INT64:
		return ir.I64, true
	case onnxpb.TensorProto_INT32:
		return ir.I32, true
	case onnxpb.TensorProto_BOOL:
		return ir.Bool, true
	case onnxpb.TensorProto_UINT8, onnxpb.TensorProto_INT8, onnxpb.TensorProto_INT16, onnxpb.TensorProto_UINT16:
		return ir.I64, true
	}
	return ir.Invalid, false
}

func dtypeName(t int32) string {
	if n, ok := onnxpb.TensorProto_DataType_name[t]; ok {
		return n
	}
	return fmt.Sprintf("data type %d", t)
}

// tensorOf decodes a TensorProto (an initializer or a Constant's value) into a kernels
// tensor. Data may be raw little-endian bytes or the typed repeated fields; external data is
// refused with the reason.
func tensorOf(tp *onnxpb.TensorProto) (*kernels.Tensor, error) {
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(tp.GetExternalData()) > 0 {
		return nil, fmt.Errorf("tensor %q keeps its data in an external file, which is not supported: export with a model under 2 GB", tp.GetName())
	}
	dt, ok := dtypeOf(tp.GetDataType())
	if !ok {
		return nil, fmt.Errorf("tensor %q has element type %s, which autopar has no type for", tp.GetName(), dtypeName(tp.GetDataType()))
	}
	shape := make(ir.Shape, len(tp.GetDims()))
	n := int64(1)
	for i, d := range tp.GetDims() {
		if d < 0 || (d > 0 && n > maxElements/d) {
			return nil, fmt.Errorf("tensor %q has bad dims %v", tp.GetName(), tp.GetDims())
		}
		shape[i], n = int(d), n*d
	}
	if n == 0 {
		return nil, fmt.Errorf("tensor %q is empty (dims %v): autopar has no empty tensors", tp.GetName(), tp.GetDims())
	}
	if have := stored(tp); have != n { // check before allocating what the dims ask for
		return nil, fmt.Errorf("tensor %q holds %d values, its dims %v want %d", tp.GetName(), have, tp.GetDims(), n)
	}
	t := kernels.New(ir.Type{DType: dt, Shape: shape})
	if err := fill(t, tp, int(n)); err != nil {
		return nil, fmt.Errorf("tensor %q: %v", tp.GetName(), err)
	}
	return t, nil
}

// stored is the number of values tp holds (raw bytes over the element size, or the typed
// field's length).
func stored(tp *onnxpb.TensorProto) int64 {
	dt := onnxpb.TensorProto_DataType(tp.GetDataType())
	if raw := tp.GetRawData(); len(raw) > 0 {
		if size := rawSize[dt]; size > 0 && len(raw)%size == 0 {
			return int64(len(raw) / size)
		}
		return -1
	}
	switch dt {
	case onnxpb.TensorProto_FLOAT:
		return int64(len(tp.GetFloatData()))
	case onnxpb.TensorProto_DOUBLE:
		return int64(len(tp.GetDoubleData()))
	case onnxpb.TensorProto_INT64:
		return int64(len(tp.GetInt64Data()))
	}
	return int64(len(tp.GetInt32Data()))
}

// fill sets the n values of t from tp, raw little-endian bytes or the typed fields.
// Integers are copied as int64, never through float64, so INT64_MAX (Slice's "to the end")
// survives.
func fill(t *kernels.Tensor, tp *onnxpb.TensorProto, n int) error {
	dt := onnxpb.TensorProto_DataType(tp.GetDataType())
	if raw := tp.GetRawData(); len(raw) > 0 {
		return fillRaw(t, dt, raw, n)
	}
	var got int
	switch dt {
	case onnxpb.TensorProto_FLOAT:
		got = len(tp.GetFloatData())
		if got == n {
			for i, v := range tp.GetFloatData() {
				t.Set(i, float64(v))
			}
		}
	case onnxpb.TensorProto_DOUBLE:
		got = len(tp.GetDoubleData())
		if got == n {
			copy(t.F64, tp.GetDoubleData())
		}
	case onnxpb.TensorProto_INT64:
		got = len(tp.GetInt64Data())
		if got == n {
			copy(t.Int, tp.GetInt64Data())
		}
	case onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16:
		got = len(tp.GetInt32Data())
		if got == n {
			for i, v := range tp.GetInt32Data() {
				t.Set(i, halfToFloat(dt, uint16(v)))
			}
		}
	default: // int32, bool and the small integers live in int32_data
		got = len(tp.GetInt32Data())
		if got == n {
			for i, v := range tp.GetInt32Data() {
				t.Int[i] = int64(v)
			}
		}
	}
	if got != n {
		return fmt.Errorf("holds %d values, its dims want %d", got, n)
	}
	return nil
}

var rawSize = map[onnxpb.TensorProto_DataType]int{
	onnxpb.TensorProto_FLOAT: 4, onnxpb.TensorProto_DOUBLE: 8, onnxpb.TensorProto_INT64: 8,
	onnxpb.TensorProto_INT32: 4, onnxpb.TensorProto_BOOL: 1, onnxpb.TensorProto_UINT8: 1,
	onnxpb.TensorProto_INT8: 1, onnxpb.TensorProto_INT16: 2, onnxpb.TensorProto_UINT16: 2,
	onnxpb.TensorProto_FLOAT16: 2, onnxpb.TensorProto_BFLOAT16: 2,
}

func fillRaw(t *kernels.Tensor, dt onnxpb.TensorProto_DataType, raw []byte, n int) error {
	size := rawSize[dt]
	if len(raw) != n*size {
		return fmt.Errorf("raw data is %d bytes, its dims and type want %d", len(raw), n*size)
	}
	for i := range n {
		b := raw[i*size:]
		switch dt {
		case onnxpb.TensorProto_FLOAT:
			t.Set(i, float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
		case onnxpb.TensorProto_DOUBLE:
			t.F64[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		case onnxpb.TensorProto_INT64:
			t.Int[i] = int64(binary.LittleEndian.Uint64(b))
		case onnxpb.TensorProto_INT32:
			t.Int[i] = int64(int32(binary.LittleEndian.Uint32(b)))
		case onnxpb.TensorProto_BOOL:
			t.Int[i] = int64(min(b[0], 1))
		case onnxpb.TensorProto_UINT8:
			t.Int[i] = int64(b[0])
		case onnxpb.TensorProto_INT8:
			t.Int[i] = int64(int8(b[0]))
		case onnxpb.TensorProto_INT16:
			t.Int[i] = int64(int16(binary.LittleEndian.Uint16(b)))
		case onnxpb.TensorProto_UINT16:
			t.Int[i] = int64(binary.LittleEndian.Uint16(b))
		case onnxpb.TensorProto_FLOAT16, onnxpb.TensorProto_BFLOAT16:
			t.Set(i, halfToFloat(dt, binary.LittleEndian.Uint16(b)))
		}
	}
	return nil
}

// halfToFloat widens an IEEE half or a bfloat16 bit pattern.
func halfToFloat(dt onnxpb.TensorProto_DataType, h uint16) float64 {
	if dt == onnxpb.TensorProto_BFLOAT16 {
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	sign, exp, frac := uint32(h>>15), uint32(h>>10)&0x1f, uint32(h)&0x3ff
	var f float64
	switch exp {
	case 0:
		f = math.Ldexp(float64(frac), -24)
	case 0x1f:
		f = math.Inf(1)
		if frac != 0 {
			f = math.NaN()
		}
	default:
		f = math.Ldexp(float64(frac|0x400), int(exp)-25)
	}
	if sign != 0 {
		f = -f
	}
	return f
}
