package kernels

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOneCoreSameResults checks that contractions on one core (OneCore: C tiled so that
// gonum computes each tile serially) give bit-identical results to gonum's parallel
// split, for every transpose and both accumulate modes, on sizes that gonum splits.
func TestOneCoreSameResults(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fill32 := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = r.Float32() - 0.5
		}
		return x
	}
	for _, sz := range [][3]int{{200, 70, 450}, {65, 300, 129}, {64, 10, 193}} {
		m, k, n := sz[0], sz[1], sz[2]
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				a, b := fill32(m*k), fill32(k*n)
				va, vb := view(a, m, k), view(b, k, n)
				if ta {
					va = view(a, k, m)
				}
				if tb {
					vb = view(b, n, k)
				}
				c0 := fill32(m * n)
				for _, beta := range []float32{0, 1} {
					par, ser := append([]float32(nil), c0...), append([]float32(nil), c0...)
					gemm(ta, tb, va, vb, beta, view(par, m, n))
					release := OneCore()
					gemm(ta, tb, va, vb, beta, view(ser, m, n))
					release()
					require.Equal(t, par, ser, "%v ta=%v tb=%v beta=%v", sz, ta, tb, beta)
				}
				d := make([]float64, m*k+k*n)
				for i := range d {
					d[i] = r.Float64()
				}
				a64, b64 := d[:m*k], d[m*k:]
				wa, wb := view(a64, m, k), view(b64, k, n)
				if ta {
					wa = view(a64, k, m)
				}
				if tb {
					wb = view(b64, n, k)
				}
				par, ser := make([]float64, m*n), make([]float64, m*n)
				gemm(ta, tb, wa, wb, 0, view(par, m, n))
				release := OneCore()
				gemm(ta, tb, wa, wb, 0, view(ser, m, n))
				release()
				require.Equal(t, par, ser)
			}
		}
	}
}
