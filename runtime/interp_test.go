package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// meshGraph is the serial graph the 2×2 programs below parallelize: a = tanh(x·w),
// s = Σ a, g = xᵀ·a.
func meshGraph(t *testing.T, rows, k, m int) *ir.Graph {
	g := ir.NewGraph("mesh")
	must := func(id ir.ValueID, err error) ir.ValueID {
		t.Helper()
		require.NoError(t, err)
		return id
	}
	x := must(g.Declare(ir.OpInput, "x", typ(ir.F64, rows, k), 0, ir.Pos{}))
	w := must(g.Declare(ir.OpParam, "w", typ(ir.F64, k, m), -1, ir.Pos{}))
	h := must(g.Append(ir.OpMatMul, "h", []ir.ValueID{x, w}, nil, ir.Pos{}))
	a := must(g.Append(ir.OpTanh, "a", []ir.ValueID{h}, nil, ir.Pos{}))
	s := must(g.Append(ir.OpReduceSum, "s", []ir.ValueID{a}, ir.Attrs{}.With("axes", []int{0, 1}), ir.Pos{}))
	xt := must(g.Append(ir.OpTranspose, "xt", []ir.ValueID{x}, transposeAttrs, ir.Pos{}))
	gw := must(g.Append(ir.OpMatMul, "g", []ir.ValueID{xt, a}, nil, ir.Pos{}))
	for _, id := range []ir.ValueID{s, a, gw} {
		g.AddOutput(id, ir.Pos{})
	}
	require.NoError(t, ir.Verify(g))
	return g
}

// meshPrograms runs meshGraph on a 2×2 mesh: axis 0 splits the batch (data parallel), axis
// 1 splits w's columns (tensor parallel). Device (i, j) = 2i+j holds rows block i of x and
// column block j of w; a is all-gathered along the tensor axis, s all-reduced over the
// whole mesh, g all-reduced along the data axis.
func meshPrograms(rows, k, m int) []*program.Program {
	r, c := rows/2, m/2
	bs := make([]*builder, 4)
	for d := range 4 {
		i, j := d/2, d%2
		tensorGroup := []DeviceID{DeviceID(2 * i), DeviceID(2*i + 1)}
		dataGroup := []DeviceID{DeviceID(j), DeviceID(2 + j)}
		b := newBuilder(DeviceID(d))
		x := b.load("x", typ(ir.F64, r, k), i*r, 0)
		w := b.load("w", typ(ir.F64, k, c), 0, j*c)
		h := b.compute("h", typ(ir.F64, r, c), ir.OpMatMul, nil, x, w)
		a := b.compute("a", typ(ir.F64, r, c), ir.OpTanh, nil, h)
		s := b.compute("s", typ(ir.F64), ir.OpReduceSum, ir.Attrs{}.With("axes", []int{0, 1}), a)
		b.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{s}, Group: devices(4), Note: "s"})
		b.store("s", s)
		af := b.def("a.full", typ(ir.F64, r, m), program.Instr{Kind: program.AllGather, Args: []program.BufferID{a}, Group: tensorGroup, Axis: 1})
		b.emit(program.Instr{Kind: program.Store, Args: []program.BufferID{af}, Name: "a", Offsets: []int{i * r, 0}, Full: typ(ir.F64, rows, m)})
		xt := b.compute("xt", typ(ir.F64, k, r), ir.OpTranspose, transposeAttrs, x)
		gw := b.compute("g", typ(ir.F64, k, c), ir.OpMatMul, nil, xt, a)
		b.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{gw}, Group: dataGroup, Note: "g"})
		b.emit(program.Instr{Kind: program.Store, Args: []program.BufferID{gw}, Name: "g", Offsets: []int{0, j * c}, Full: typ(ir.F64, k, m)})
		b.free(x, w, h, a, s, af, xt, gw)
		bs[d] = b
	}
	return programs(bs)
}

// The runtime and the serial interpreter share kernels: a 2×2 data × tensor parallel run
// gives the interpreter's outputs, within the rounding of the split sums.
func TestMeshRunEqualsInterpreter(t *testing.T) {
	const rows, k, m = 8, 6, 4
	g := meshGraph(t, rows, k, m)
	feeds := interp.InitParams(g, 1)
	for name, x := range interp.RandomInputs(g, 2) {
		feeds[name] = x
	}
	serial, err := interp.Run(context.Background(), g, feeds)
	require.NoError(t, err)

	res, err := Run(context.Background(), meshPrograms(rows, k, m), Data(feeds), Options{})
	require.NoError(t, err)
	for i, name := range []string{"s", "a", "g"} {
		want := serial.Outputs[i]
		got := res.Stores[name]
		require.NotNil(t, got, name)
		require.Equal(t, want.Type.String(), got.Type.String(), name)
		_, rel := kernels.MaxAbsDiff(got, want)
		assert.Less(t, rel, 1e-12, name)
	}
	assert.Equal(t, kernels.FromF64(ir.F64, ir.Shape{rows, m}, serial.Outputs[1].Float64s()).F64, res.Stores["a"].F64,
		"a involves no split sum: exact")

	// Traffic per device: the all-gather of a (1/2 of 4×4 f64), the all-reduce of g over 2
	// (2·1/2 of 6×2 f64) and the scalar all-reduce over 4, whose one element is chunk 3:
	// devices 0-2 send it to device 3 and get the sum back (8 bytes each way), device 3
	// receives three and sends the sum three times. mesh.BytesSent's 2·3/4·8 = 12 bytes holds
	// only on average: the formula assumes n divides the elements.
	for d, st := range res.Devices {
		scalar := int64(8)
		if d == 3 {
			scalar = 24
		}
		want := scalar + 4*4*8/2 + 6*2*8
		assert.Equal(t, want, st.BytesSent, fmt.Sprintf("device %d", d))
		assert.Equal(t, want, st.BytesReceived, fmt.Sprintf("device %d", d))
	}
}
