package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/autopar/autopar/ir"
	"github.com/stretchr/testify/require"
)

// convCase is one convolution geometry.
type convCase struct {
	n, c, h, w, o, kh, kw, sh, sw, ph, pw int
}

var convCases = []convCase{
	{1, 1, 3, 3, 1, 2, 2, 1, 1, 0, 0},
	{2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1},
	{2, 2, 7, 5, 3, 3, 2, 2, 1, 1, 0},
	{1, 3, 8, 8, 2, 5, 5, 3, 2, 2, 4},
	{3, 1, 4, 4, 2, 1, 1, 2, 2, 0, 0},
}

func (c convCase) attrs() ir.Attrs {
	return ir.Attrs{}.With("stride", []int{c.sh, c.sw}).With("pad", []int{c.ph, c.pw})
}

// naiveConv is the definition: y[n,o,i,j] = Σ x[n,c,i·s-p+a, j·s-p+b]·f[o,c,a,b].
func naiveConv(c convCase, x, f *Tensor) ([]float64, ir.Shape) {
	ho, wo := (c.h+2*c.ph-c.kh)/c.sh+1, (c.w+2*c.pw-c.kw)/c.sw+1
	out := make([]float64, c.n*c.o*ho*wo)
	for n := range c.n {
		for o := range c.o {
			for i := range ho {
				for j := range wo {
					var s float64
					for ch := range c.c {
						for a := range c.kh {
							for b := range c.kw {
								y, z := i*c.sh-c.ph+a, j*c.sw-c.pw+b
								if y >= 0 && y < c.h && z >= 0 && z < c.w {
									s += x.At(((n*c.c+ch)*c.h+y)*c.w+z) * f.At(((o*c.c+ch)*c.kh+a)*c.kw+b)
								}
							}
						}
					}
					out[((n*c.o+o)*ho+i)*wo+j] = s
				}
			}
		}
	}
	return out, ir.Shape{c.n, c.o, ho, wo}
}

func TestConv2D(t *testing.T) {
	r := rngFor(8)
	for _, c := range convCases {
		if c.pw >= c.kw || c.ph >= c.kh {
			continue // the shape rule wants pad < window
		}
		for _, dt := range []ir.DType{ir.F64, ir.F32} {
			t.Run(fmt.Sprintf("%v/%s", c, dt), func(t *testing.T) {
				x := randT(r, typ(dt, c.n, c.c, c.h, c.w))
				f := randT(r, typ(dt, c.o, c.c, c.kh, c.kw))
				want, shape := naiveConv(c, x, f)
				got := eval(t, ir.OpConv2D, c.attrs(), x, f)
				require.Equal(t, shape, got.Type.Shape)
				requireClose(t, want, got, 1e-5)
			})
		}
	}
}

// TestConvGradsAreAdjoints: <conv(x, f), g> == <x, input_grad(g, f)> == <f, filter_grad(x, g)>.
func TestConvGradsAreAdjoints(t *testing.T) {
	r := rngFor(9)
	for _, c := range convCases {
		if c.pw >= c.kw || c.ph >= c.kh {
			continue
		}
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			x := randT(r, typ(ir.F64, c.n, c.c, c.h, c.w))
			f := randT(r, typ(ir.F64, c.o, c.c, c.kh, c.kw))
			y := eval(t, ir.OpConv2D, c.attrs(), x, f)
			g := randT(r, y.Type)
			dx := eval(t, ir.OpConv2DInputGrad, c.attrs().With("shape", []int(x.Type.Shape)), g, f)
			df := eval(t, ir.OpConv2DFilterGrad, c.attrs().With("kernel", []int{c.kh, c.kw}), x, g)
			lhs := dot(y, g)
			require.InDelta(t, lhs, dot(x, dx), 1e-9*math.Max(1, math.Abs(lhs)))
			require.InDelta(t, lhs, dot(f, df), 1e-9*math.Max(1, math.Abs(lhs)))
		})
	}
}

func TestPool(t *testing.T) {
	x := vals(typ(ir.F64, 1, 1, 3, 3), 1, 2, 3, 4, 9, 6, 7, 8, 5)
	at := ir.Attrs{}.With("window", []int{2, 2}).With("stride", []int{1, 1})
	requireClose(t, []float64{9, 9, 9, 9}, eval(t, ir.OpMaxPool, at, x), 0)
	requireClose(t, []float64{4, 5, 7, 7}, eval(t, ir.OpAvgPool, at, x), 0)
	dy := vals(typ(ir.F64, 1, 1, 2, 2), 1, 2, 3, 4)
	requireClose(t, []float64{0, 0, 0, 0, 10, 0, 0, 0, 0}, eval(t, ir.OpMaxPoolGrad, at, x, dy), 0)
	requireClose(t, []float64{0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1},
		eval(t, ir.OpAvgPoolGrad, at.With("shape", []int{1, 1, 3, 3}), dy), 1e-12)

	// Padding: max ignores it, avg counts it as zeros over the full window.
	pad := ir.Attrs{}.With("window", []int{2, 2}).With("stride", []int{2, 2}).With("pad", []int{1, 1})
	requireClose(t, []float64{1, 3, 7, 9}, eval(t, ir.OpMaxPool, pad, x), 0)
	requireClose(t, []float64{0.25, 5.0 / 4, 11.0 / 4, 7}, eval(t, ir.OpAvgPool, pad, x), 1e-12)
}

// TestPoolGradsAreAdjoints: avg_pool_grad is avg_pool's transpose, and max_pool_grad is the
// transpose of the linear map that picks each window's argmax.
func TestPoolGradsAreAdjoints(t *testing.T) {
	r := rngFor(10)
	for _, p := range []struct{ win, stride, pad []int }{
		{[]int{2, 2}, []int{2, 2}, []int{0, 0}}, {[]int{3, 3}, []int{1, 2}, []int{1, 1}}, {[]int{3, 2}, []int{2, 1}, []int{2, 0}},
	} {
		at := ir.Attrs{}.With("window", p.win).With("stride", p.stride).With("pad", p.pad)
		x := randT(r, typ(ir.F64, 2, 3, 7, 6))
		y := eval(t, ir.OpAvgPool, at, x)
		g := randT(r, y.Type)
		dx := eval(t, ir.OpAvgPoolGrad, at.With("shape", []int(x.Type.Shape)), g)
		require.InDelta(t, dot(y, g), dot(x, dx), 1e-10)

		m := eval(t, ir.OpMaxPool, at, x)
		dm := eval(t, ir.OpMaxPoolGrad, at, x, g)
		require.InDelta(t, dot(m, g), dot(x, dm), 1e-10) // max is linear in x at fixed argmax
	}
}

// The convolution and its input gradient run every image of the batch in one GEMM; each
// image's result equals, bit for bit, the op on that image alone.
func TestConvBatchEqualsImageByImage(t *testing.T) {
	at := ir.Attrs{}.With("stride", []int{2, 2}).With("pad", []int{1, 1})
	n, c, hw, o := 3, 8, 2, 16
	xs, fs := ir.Shape{n, c, hw, hw}, ir.Shape{o, c, 3, 3}
	g := newGeom(xs, 3, 3, at)
	ys := ir.Shape{n, o, g.ho, g.wo}
	fill := func(k int64, seed int) []float32 {
		x := make([]float32, k)
		for i := range x {
			x[i] = float32((i*7+seed)%13)/13 - 0.4
		}
		return x
	}
	x, f, dy := fill(xs.NumElements(), 1), fill(fs.NumElements(), 2), fill(ys.NumElements(), 3)
	y, dx := make([]float32, ys.NumElements()), make([]float32, xs.NumElements())
	conv(ir.OpConv2D, at, ys, y, xs, x, fs, f)
	conv(ir.OpConv2DInputGrad, at, xs, dx, ys, dy, fs, f)
	xi, yi := c*hw*hw, o*g.ho*g.wo
	one := func(s ir.Shape) ir.Shape { return append(ir.Shape{1}, s[1:]...) }
	for i := range n {
		y1, dx1 := make([]float32, yi), make([]float32, xi)
		conv(ir.OpConv2D, at, one(ys), y1, one(xs), x[i*xi:(i+1)*xi], fs, f)
		conv(ir.OpConv2DInputGrad, at, one(xs), dx1, one(ys), dy[i*yi:(i+1)*yi], fs, f)
		require.Equal(t, y1, y[i*yi:(i+1)*yi], "image %d", i)
		require.Equal(t, dx1, dx[i*xi:(i+1)*xi], "image %d", i)
	}
}
