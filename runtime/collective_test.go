package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// at2 reads element (i, j) of a rank-2 tensor.
func at2(x *kernels.Tensor, i, j int) float64 { return x.At(i*x.Type.Shape[1] + j) }

// reference computes, with plain loops, what device r must hold after collective k on the
// rank-2 inputs xs: the serial definition each transport is checked against. Sums run in
// rank order, so f64 results must match bit for bit.
func reference(k program.Kind, xs []*kernels.Tensor, r int) *kernels.Tensor {
	n := len(xs)
	rows, cols := xs[0].Type.Shape[0], xs[0].Type.Shape[1]
	sum := func(i, j int) float64 {
		s := at2(xs[0], i, j)
		for q := 1; q < n; q++ {
			s += at2(xs[q], i, j)
		}
		return s
	}
	var shape ir.Shape
	var val func(i, j int) float64
	switch k {
	case program.AllReduce:
		shape, val = ir.Shape{rows, cols}, sum
	case program.AllGather: // along axis 1
		shape, val = ir.Shape{rows, cols * n}, func(i, j int) float64 { return at2(xs[j/cols], i, j%cols) }
	case program.ReduceScatter: // along axis 0
		b := rows / n
		shape, val = ir.Shape{b, cols}, func(i, j int) float64 { return sum(r*b+i, j) }
	case program.AllToAll: // split 0, concat 1
		b := rows / n
		shape, val = ir.Shape{b, cols * n}, func(i, j int) float64 { return at2(xs[j/cols], r*b+i, j%cols) }
	}
	out := kernels.New(ir.Type{DType: xs[0].Type.DType, Shape: shape})
	for i := range shape[0] {
		for j := range shape[1] {
			out.Set(i*shape[1]+j, val(i, j))
		}
	}
	return out
}

var meshKind = map[program.Kind]mesh.Collective{
	program.AllReduce: mesh.AllReduce, program.AllGather: mesh.AllGather,
	program.ReduceScatter: mesh.ReduceScatter, program.AllToAll: mesh.AllToAll,
}

// collectiveRun runs collective k over n devices on inputs of type t and returns the inputs
// and the result.
func collectiveRun(t *testing.T, k program.Kind, n int, in ir.Type) ([]*kernels.Tensor, *Result) {
	t.Helper()
	data := Data{}
	xs := make([]*kernels.Tensor, n)
	bs := make([]*builder, n)
	for d := range n {
		xs[d] = random(in, uint64(100*n+d))
		feed := fmt.Sprintf("x.d%d", d)
		data[feed] = xs[d]
		b := newBuilder(DeviceID(d))
		x := b.load(feed, in)
		instr := program.Instr{Kind: k, Args: []program.BufferID{x}, Group: devices(n), Axis: 0, ConcatAxis: 1}
		if k == program.AllGather {
			instr.Axis = 1
		}
		out := x
		if k == program.AllReduce {
			b.emit(instr)
		} else {
			outT, ok := program.CollectiveOut(k, in, n, instr.Axis, instr.ConcatAxis)
			require.True(t, ok)
			out = b.def("out", outT, instr)
		}
		b.store(fmt.Sprintf("out.d%d", d), out)
		bs[d] = b
	}
	res, err := Run(context.Background(), programs(bs), data, Options{})
	require.NoError(t, err)
	return xs, res
}

func TestCollectivesMatchSerialReference(t *testing.T) {
	in := typ(ir.F64, 8, 16)
	for _, k := range []program.Kind{program.AllReduce, program.AllGather, program.ReduceScatter, program.AllToAll} {
		for _, n := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/n=%d", k, n), func(t *testing.T) {
				xs, res := collectiveRun(t, k, n, in)
				// B as mesh.SentFraction defines it: each device's input for the reductions,
				// the union of the blocks for all-gather and all-to-all.
				b := float64(in.Bytes())
				if k == program.AllGather || k == program.AllToAll {
					b *= float64(n)
				}
				want := mesh.BytesSent(meshKind[k], n, b)
				for d := range n {
					got := res.Stores[fmt.Sprintf("out.d%d", d)]
					ref := reference(k, xs, d)
					require.Equal(t, ref.Type.String(), got.Type.String())
					assert.Equal(t, ref.F64, got.F64, "device %d: must equal the rank-order serial sum bit for bit", d)
					st := res.Devices[d]
					assert.Equal(t, int64(want), st.BytesSent, "device %d sent", d)
					assert.Equal(t, int64(want), st.BytesReceived, "device %d received", d)
					peak := in.Bytes() + got.Type.Bytes()
					if k == program.AllReduce {
						peak = in.Bytes()
					}
					assert.Equal(t, peak, st.PeakBytes, "device %d peak", d)
					assert.Equal(t, 3, st.Instrs)
					assert.Equal(t, 1, st.Count[k])
				}
			})
		}
	}
}

// An all-reduce whose element count n does not divide moves uneven chunks; each device
// counts what it moved: the n−1 chunks it scatters plus its own summed chunk n−1 times.
func TestAllReduceUnevenChunks(t *testing.T) {
	in := typ(ir.F64, 5, 3) // 15 elements over 4 devices: chunks of 3, 4, 4, 4
	n := 4
	xs, res := collectiveRun(t, program.AllReduce, n, in)
	sizes := []int64{3, 4, 4, 4}
	for d := range n {
		assert.Equal(t, reference(program.AllReduce, xs, d).F64, res.Stores[fmt.Sprintf("out.d%d", d)].F64)
		want := (15 - sizes[d] + int64(n-1)*sizes[d]) * 8
		assert.Equal(t, want, res.Devices[d].BytesSent, "device %d", d)
		assert.Equal(t, want, res.Devices[d].BytesReceived, "device %d", d)
	}
}

// f32 sums run in float32 through the kernels' add, in rank order, and agree on every rank.
func TestAllReduceF32RankOrder(t *testing.T) {
	in := typ(ir.F32, 4, 4)
	xs, res := collectiveRun(t, program.AllReduce, 4, in)
	want := make([]float32, 16)
	for i := range want {
		s := xs[0].F32[i]
		for q := 1; q < 4; q++ {
			s += xs[q].F32[i]
		}
		want[i] = s
	}
	for d := range 4 {
		assert.Equal(t, want, res.Stores[fmt.Sprintf("out.d%d", d)].F32)
	}
}

// Successive collectives on one group, and collectives on overlapping groups, must never
// take each other's messages.
func TestCollectiveSequences(t *testing.T) {
	in := typ(ir.F64, 4, 4)
	n := 4
	data := Data{}
	bs := make([]*builder, n)
	pairs := [][]DeviceID{{0, 1}, {2, 3}}
	for d := range n {
		feed := fmt.Sprintf("x.d%d", d)
		data[feed] = random(in, uint64(d))
		b := newBuilder(DeviceID(d))
		x := b.load(feed, in)
		for range 3 { // x := 3 successive all-reduces over all, then one over the pair
			b.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{x}, Group: devices(n)})
		}
		b.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{x}, Group: pairs[d/2]})
		b.store(fmt.Sprintf("out.d%d", d), x)
		bs[d] = b
	}
	res, err := Run(context.Background(), programs(bs), data, Options{})
	require.NoError(t, err)
	// After the first all-reduce every device holds S; then 4S, 16S; the pair sum gives 32S.
	s := reference(program.AllReduce, []*kernels.Tensor{data["x.d0"], data["x.d1"], data["x.d2"], data["x.d3"]}, 0)
	for d := range n {
		got := res.Stores[fmt.Sprintf("out.d%d", d)]
		for i, v := range s.F64 {
			assert.InDelta(t, 32*v, got.F64[i], 1e-9)
		}
		assert.Equal(t, res.Stores["out.d0"].F64, got.F64, "all ranks bit-identical")
	}
}
