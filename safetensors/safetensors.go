// Package safetensors reads and writes tensors in the safetensors format of Hugging Face
// (https://github.com/huggingface/safetensors): an 8-byte little-endian header length, a
// JSON header mapping each name to its dtype, shape and byte range, then the raw
// little-endian data. It is the weights file `autopar import` writes beside the .ir and
// `autopar run --weights` reads.
//
// Write is deterministic: tensors are laid out in name order and the header's keys are
// sorted, so the same tensors give byte-identical files. Read checks every offset, size and
// dtype against the file before touching the data, and names the tensor at fault.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// maxHeader bounds the JSON header, as the reference implementation does (100 MB), so a
// corrupt length cannot ask for unbounded memory.
const maxHeader = 100 << 20

var dtypeNames = map[ir.DType]string{ir.F32: "F32", ir.F64: "F64", ir.I32: "I32", ir.I64: "I64", ir.Bool: "BOOL"}

func dtypeOf(s string) (ir.DType, bool) {
	for d, n := range dtypeNames {
		if n == s {
			return d, true
		}
	}
	return ir.Invalid, false
}

type entry struct {
	DType   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// Write writes the tensors in safetensors format. metadata may be nil. It fails on a
// tensor of a dtype the format has no name for here (f16 and bf16 are held as f32 by the
// kernels; write them as f32).
func Write(w io.Writer, tensors map[string]*kernels.Tensor, metadata map[string]string) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var data bytes.Buffer
	for _, n := range names {
		t := tensors[n]
		dn, ok := dtypeNames[t.Type.DType]
		if !ok {
			return fmt.Errorf("safetensors: tensor %s has dtype %s, which is not written (f32, f64, i32, i64, bool)", n, t.Type.DType)
		}
		start := int64(data.Len())
		writeData(&data, t)
		shape := append([]int{}, t.Type.Shape...)
		header[n] = entry{DType: dn, Shape: shape, Offsets: [2]int64{start, int64(data.Len())}}
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	for len(hj)%8 != 0 { // align the data to 8 bytes, as the reference writer does
		hj = append(hj, ' ')
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hj)))
	for _, b := range [][]byte{n[:], hj, data.Bytes()} {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func writeData(b *bytes.Buffer, t *kernels.Tensor) {
	var buf [8]byte
	for i := range t.Len() {
		switch t.Type.DType {
		case ir.F32:
			binary.LittleEndian.PutUint32(buf[:], math.Float32bits(t.F32[i]))
			b.Write(buf[:4])
		case ir.F64:
			binary.LittleEndian.PutUint64(buf[:], math.Float64bits(t.F64[i]))
			b.Write(buf[:8])
		case ir.I32:
			binary.LittleEndian.PutUint32(buf[:], uint32(int32(t.Int[i])))
			b.Write(buf[:4])
		case ir.I64:
			binary.LittleEndian.PutUint64(buf[:], uint64(t.Int[i]))
			b.Write(buf[:8])
		case ir.Bool:
			b.WriteByte(byte(t.Int[i] & 1))
		}
	}
}

// WriteFile writes the tensors to path, through a temporary file renamed into place.
func WriteFile(path string, tensors map[string]*kernels.Tensor, metadata map[string]string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = Write(f, tensors, metadata)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Read parses a safetensors file held in data. Errors name the tensor and what is wrong
// with it; nothing is allocated beyond what the header's checked sizes ask for.
func Read(data []byte) (map[string]*kernels.Tensor, map[string]string, error) {
	if len(data) < 8 {
		return nil, nil, fmt.Errorf("safetensors: file is %d bytes, shorter than the 8-byte header length", len(data))
	}
	hl := binary.LittleEndian.Uint64(data[:8])
	if hl > maxHeader || hl > uint64(len(data)-8) {
		return nil, nil, fmt.Errorf("safetensors: header length %d does not fit the %d-byte file", hl, len(data))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data[8:8+hl], &raw); err != nil {
		return nil, nil, fmt.Errorf("safetensors: header is not a JSON object: %v", err)
	}
	body := data[8+hl:]
	var meta map[string]string
	out := map[string]*kernels.Tensor{}
	for name, r := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(r, &meta); err != nil {
				return nil, nil, fmt.Errorf("safetensors: __metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		t, err := readTensor(name, r, body)
		if err != nil {
			return nil, nil, err
		}
		out[name] = t
	}
	return out, meta, nil
}

func readTensor(name string, r json.RawMessage, body []byte) (*kernels.Tensor, error) {
	var e entry
	if err := json.Unmarshal(r, &e); err != nil {
		return nil, fmt.Errorf("safetensors: tensor %s: malformed entry: %v", name, err)
	}
	dt, ok := dtypeOf(e.DType)
	if !ok {
		return nil, fmt.Errorf("safetensors: tensor %s has dtype %q; autopar reads F32, F64, I32, I64 and BOOL", name, e.DType)
	}
	n := int64(1)
	for _, d := range e.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt32/int64(d)) {
			return nil, fmt.Errorf("safetensors: tensor %s has a bad shape %v", name, e.Shape)
		}
		n *= int64(d)
	}
	start, end := e.Offsets[0], e.Offsets[1]
	if start < 0 || end < start || end > int64(len(body)) || end-start != n*int64(dt.Size()) {
		return nil, fmt.Errorf("safetensors: tensor %s: bytes [%d, %d) do not hold %s%v in a %d-byte body",
			name, start, end, dt, e.Shape, len(body))
	}
	t := kernels.New(ir.Type{DType: dt, Shape: ir.Shape(e.Shape)})
	b := body[start:end]
	for i := range int(n) {
		switch dt {
		case ir.F32:
			t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case ir.F64:
			t.F64[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		case ir.I32:
			t.Int[i] = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
		case ir.I64:
			t.Int[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		case ir.Bool:
			t.Int[i] = int64(b[i] & 1)
		}
	}
	return t, nil
}

// ReadFile reads a safetensors file; errors name the file.
func ReadFile(path string) (map[string]*kernels.Tensor, map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	t, m, err := Read(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, m, nil
}

// Apply puts the weights into params, the tensors of g's params by name (as
// interp.InitParams makes them): each weight must name a param of g and have its type.
// Params the weights do not name keep their tensors. It returns the number applied.
func Apply(g *ir.Graph, params map[string]*kernels.Tensor, weights map[string]*kernels.Tensor) (int, error) {
	names := make([]string, 0, len(weights))
	for n := range weights {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		id, ok := g.Lookup(n)
		if !ok || g.Value(id).Op != ir.OpParam {
			return 0, fmt.Errorf("weights: %s is not a param of graph %s", n, g.Name)
		}
		if want, got := g.Value(id).Type, weights[n].Type; !want.Equal(got) {
			return 0, fmt.Errorf("weights: %s is %s in the weights but %s in graph %s", n, got, want, g.Name)
		}
		params[n] = weights[n].Clone()
	}
	return len(names), nil
}
