package mpi

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// Messages carry every dtype bit for bit (NaN payloads, negative zero, f16 held as f32)
// with their p2p tag; anything else is refused with an error, never a panic.
func TestWireRoundTrip(t *testing.T) {
	tags := []program.Tag{{}, {Value: "l0.fc.matmul", MicroBatch: 3}, {Value: "x", MicroBatch: -1}}
	for _, dt := range []ir.DType{ir.F32, ir.F16, ir.BF16, ir.F64, ir.I32, ir.I64, ir.Bool} {
		for _, shape := range []ir.Shape{{}, {1}, {3, 5}, {2, 1, 4}} {
			x := kernels.New(ir.Type{DType: dt, Shape: shape})
			for i := range x.Len() {
				x.Set(i, float64(i)-1.5)
			}
			if x.F32 != nil {
				x.F32[0] = float32(math.Copysign(0, -1))
			}
			if x.F64 != nil {
				x.F64[0] = math.Float64frombits(0x7ff8000000000123) // a NaN with a payload
			}
			for _, tag := range tags {
				b := make([]byte, encodedSize(x, tag))
				encode(b, x, tag)
				y, got, err := decode(b)
				require.NoError(t, err)
				require.Equal(t, tag, got)
				require.True(t, y.Type.Equal(x.Type), "%s became %s", x.Type, y.Type)
				require.Equal(t, x.F32, y.F32)
				require.Equal(t, x.Int, y.Int)
				for i := range x.F64 {
					require.Equal(t, math.Float64bits(x.F64[i]), math.Float64bits(y.F64[i]))
				}
				for n := range len(b) {
					if _, _, err := decode(b[:n]); err == nil {
						t.Fatalf("%s truncated to %d of %d bytes decoded", x.Type, n, len(b))
					}
				}
			}
		}
	}
	_, _, err := decode([]byte("not a message at all, at all"))
	require.ErrorContains(t, err, "corrupt message")
}
