package runtime

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

func eval(t *testing.T, op ir.Op, at ir.Attrs, out ir.Type, args ...*kernels.Tensor) *kernels.Tensor {
	t.Helper()
	x, err := kernels.Eval(op, at, out, args)
	require.NoError(t, err)
	return x
}

var transposeAttrs = ir.Attrs{}.With("perm", []int{1, 0})

// dataParallel builds the programs of one data-parallel step of y = x·w on n devices: each
// loads its rows of x and the whole w, computes its partial weight gradient xᵢᵀ·(xᵢ·w),
// all-reduces it and stores it (replicated: every device stores the same result).
func dataParallel(n int, dt ir.DType, rows, k, m int) []*program.Program {
	bs := make([]*builder, n)
	r := rows / n
	for d := range n {
		b := newBuilder(DeviceID(d))
		x := b.load("x", typ(dt, r, k), d*r, 0)
		w := b.load("w", typ(dt, k, m))
		y := b.compute("y", typ(dt, r, m), ir.OpMatMul, nil, x, w)
		xt := b.compute("xt", typ(dt, k, r), ir.OpTranspose, transposeAttrs, x)
		b.free(x)
		g := b.compute("grad.w", typ(dt, k, m), ir.OpMatMul, nil, xt, y)
		b.free(xt, y)
		if n > 1 {
			b.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{g}, Group: devices(n), Note: "grad.w"})
		}
		b.store("grad.w", g)
		b.free(w, g)
		bs[d] = b
	}
	return programs(bs)
}

func TestDataParallelMatMulEqualsSerial(t *testing.T) {
	const rows, k, m = 8, 6, 5
	for _, dt := range []ir.DType{ir.F64, ir.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			data := Data{"x": random(typ(dt, rows, k), 1), "w": random(typ(dt, k, m), 2)}
			res, err := Run(context.Background(), dataParallel(2, dt, rows, k, m), data, Options{})
			require.NoError(t, err)
			got := res.Stores["grad.w"]

			// The serial step on the whole batch: equal within rounding (the sum over rows
			// is split in two).
			y := eval(t, ir.OpMatMul, nil, typ(dt, rows, m), data["x"], data["w"])
			xt := eval(t, ir.OpTranspose, transposeAttrs, typ(dt, k, rows), data["x"])
			serial := eval(t, ir.OpMatMul, nil, typ(dt, k, m), xt, y)
			_, rel := kernels.MaxAbsDiff(got, serial)
			tol := 1e-12
			if dt == ir.F32 {
				tol = 1e-5
			}
			assert.Less(t, rel, tol)

			// The same sum taken per half in rank order: equal bit for bit.
			var halves []*kernels.Tensor
			for d := range 2 {
				xd, err := sliceBlock(data["x"], []int{d * rows / 2, 0}, ir.Shape{rows / 2, k})
				require.NoError(t, err)
				yd := eval(t, ir.OpMatMul, nil, typ(dt, rows/2, m), xd, data["w"])
				xdt := eval(t, ir.OpTranspose, transposeAttrs, typ(dt, k, rows/2), xd)
				halves = append(halves, eval(t, ir.OpMatMul, nil, typ(dt, k, m), xdt, yd))
			}
			exact := eval(t, ir.OpAdd, nil, typ(dt, k, m), halves[0], halves[1])
			assert.Equal(t, exact, got)

			// Peak: after x is freed, w (30) + y (20) + xt (24) + grad.w (30) elements are
			// live, more than the 98 just before the free.
			size := int64(dt.Size())
			st := res.Devices[0]
			assert.Equal(t, size*104, st.PeakBytes)
			assert.Equal(t, size*k*m, st.BytesSent, "2(n-1)/n·B with n = 2")
			assert.Equal(t, 3, st.Count[program.Compute])
		})
	}
}

// pipeline builds a chain of stages over n devices: stage s receives the activation of each
// micro-batch from s−1, applies tanh(h·w_s), and sends it on; the last stage stores it.
func pipeline(n, mbs, rows, width int) []*program.Program {
	bs := make([]*builder, n)
	act := typ(ir.F64, rows, width)
	for s := range n {
		b := newBuilder(DeviceID(s))
		w := b.load(fmt.Sprintf("w%d", s), typ(ir.F64, width, width))
		for mb := range mbs {
			var h program.BufferID
			if s == 0 {
				h = b.load("x", act, mb*rows, 0)
			} else {
				h = b.recv(fmt.Sprintf("h%d.mb%d", s, mb), act, DeviceID(s-1), fmt.Sprintf("h%d", s), mb)
			}
			z := b.compute(fmt.Sprintf("z%d.mb%d", s, mb), act, ir.OpMatMul, nil, h, w)
			a := b.compute(fmt.Sprintf("h%d.mb%d", s+1, mb), act, ir.OpTanh, nil, z)
			b.free(h, z)
			if s < n-1 {
				b.send(a, DeviceID(s+1), fmt.Sprintf("h%d", s+1), mb)
			} else {
				b.emit(program.Instr{Kind: program.Store, Args: []program.BufferID{a}, Name: "out",
					Offsets: []int{mb * rows, 0}, Full: typ(ir.F64, mbs*rows, width)})
			}
			b.free(a)
		}
		bs[s] = b
	}
	return programs(bs)
}

func TestPipelineEqualsSerial(t *testing.T) {
	const mbs, rows, width = 3, 2, 4
	for _, n := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("stages=%d", n), func(t *testing.T) {
			data := Data{"x": random(typ(ir.F64, mbs*rows, width), 9)}
			for s := range n {
				data[fmt.Sprintf("w%d", s)] = random(typ(ir.F64, width, width), uint64(10+s))
			}
			res, err := Run(context.Background(), pipeline(n, mbs, rows, width), data, Options{})
			require.NoError(t, err)

			h := data["x"]
			for s := range n {
				h = eval(t, ir.OpTanh, nil, h.Type, eval(t, ir.OpMatMul, nil, h.Type, h, data[fmt.Sprintf("w%d", s)]))
			}
			assert.Equal(t, h.F64, res.Stores["out"].F64, "row-wise ops on micro-batches are exact")

			act := int64(rows * width * 8)
			for s, st := range res.Devices {
				var sent, recv int64
				if s < n-1 {
					sent = mbs * act
				}
				if s > 0 {
					recv = mbs * act
				}
				assert.Equal(t, sent, st.BytesSent, "stage %d", s)
				assert.Equal(t, recv, st.BytesReceived, "stage %d", s)
				// w, then h, z and the new activation of one micro-batch at a time.
				assert.Equal(t, int64(width*width*8)+3*act, st.PeakBytes, "stage %d", s)
			}
		})
	}
}
