package kernels

import "github.com/autopar/autopar/ir"

var _ = register(map[ir.Op]kernel{
	ir.OpConv2D:           evalConv,
	ir.OpConv2DInputGrad:  evalConv,
	ir.OpConv2DFilterGrad: evalConv,
	ir.OpMaxPool:          evalPool,
	ir.OpMaxPoolGrad:      evalPool,
	ir.OpAvgPool:          evalPool,
	ir.OpAvgPoolGrad:      evalPool,
})

// Convolution (NCHW input, OCKhKw filter) and its two gradients, by im2col and gemm: per
// image the input is unfolded into cols [C·KH·KW, Ho·Wo], so that
//
//	conv:        y[n]  = F · cols(x[n])               [O, Ho·Wo]
//	input grad:  dx[n] = col2im(Fᵀ · dy[n])           [C, H, W]
//	filter grad: dF    = Σ_n dy[n] · cols(x[n])ᵀ       [O, C·KH·KW]
//
// col2im is im2col's exact adjoint (it adds where im2col copies), so the gradients are
// the exact adjoints of the forward op.

// geom is the geometry of one convolution or pooling.
type geom struct {
	c, h, w    int // input channels and spatial size
	kh, kw     int // window
	sh, sw     int // stride
	ph, pw     int // padding
	ho, wo     int // output spatial size
	ncol, nout int // c·kh·kw and ho·wo
}

func newGeom(x ir.Shape, kh, kw int, at ir.Attrs) geom {
	st, pad := at.Ints("stride"), at.Ints("pad")
	g := geom{c: x[1], h: x[2], w: x[3], kh: kh, kw: kw, sh: st[0], sw: st[1], ph: pad[0], pw: pad[1]}
	g.ho = (g.h+2*g.ph-g.kh)/g.sh + 1
	g.wo = (g.w+2*g.pw-g.kw)/g.sw + 1
	g.ncol, g.nout = g.c*g.kh*g.kw, g.ho*g.wo
	return g
}

// im2col unfolds one image x [C, H, W] into cols [C·KH·KW, Ho·Wo] (rows ld apart), zero
// where the window reads padding.
func im2col[T float](g geom, x, cols []T, ld int) {
	for c := range g.c {
		for ki := range g.kh {
			for kj := range g.kw {
				row := cols[((c*g.kh+ki)*g.kw+kj)*ld:][:g.nout]
				for oi := range g.ho {
					i := oi*g.sh - g.ph + ki
					dst := row[oi*g.wo : (oi+1)*g.wo]
					if i < 0 || i >= g.h {
						clear(dst)
						continue
					}
					src := x[(c*g.h+i)*g.w:][:g.w]
					for oj := range dst {
						j := oj*g.sw - g.pw + kj
						if j < 0 || j >= g.w {
							dst[oj] = 0
						} else {
							dst[oj] = src[j]
						}
					}
				}
			}
		}
	}
}

// col2im adds cols [C·KH·KW, Ho·Wo] (rows ld apart) back into one image dx [C, H, W]:
// im2col's adjoint.
func col2im[T float](g geom, cols, dx []T, ld int) {
	for c := range g.c {
		for ki := range g.kh {
			for kj := range g.kw {
				row := cols[((c*g.kh+ki)*g.kw+kj)*ld:][:g.nout]
				for oi := range g.ho {
					i := oi*g.sh - g.ph + ki
					if i < 0 || i >= g.h {
						continue
					}
					dst := dx[(c*g.h+i)*g.w:][:g.w]
					for oj, v := range row[oi*g.wo : (oi+1)*g.wo] {
						if j := oj*g.sw - g.pw + kj; j >= 0 && j < g.w {
							dst[j] += v
						}
					}
				}
			}
		}
	}
}

func evalConv(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	if out.F32 != nil {
		conv(op, at, out.Type.Shape, out.F32, args[0].Type.Shape, args[0].F32, args[1].Type.Shape, args[1].F32)
	} else {
		conv(op, at, out.Type.Shape, out.F64, args[0].Type.Shape, args[0].F64, args[1].Type.Shape, args[1].F64)
	}
	return nil
}

// conv runs conv2d, conv2d_input_grad or conv2d_filter_grad with operands a, b and result d.
func conv[T float](op ir.Op, at ir.Attrs, ds ir.Shape, d []T, as ir.Shape, a []T, bs ir.Shape, b []T) {
	switch op {
	case ir.OpConv2D: // a = x [N,C,H,W], b = f [O,C,KH,KW]
		// The images side by side, cols [C·KH·KW, N·Ho·Wo], and one GEMM for all: on
		// small images a GEMM per image would be a matrix-vector product that reads the
		// filter once per image. Each output is the same sum in the same order either way.
		g := newGeom(as, bs[2], bs[3], at)
		n, o := as[0], bs[0]
		ld := n * g.nout
		cols := make([]T, g.ncol*ld)
		for i := range n {
			im2col(g, a[i*g.c*g.h*g.w:], cols[i*g.nout:], ld)
		}
		y := d
		if n > 1 {
			y = make([]T, o*ld)
		}
		gemm(false, false, view(b, o, g.ncol), mat[T]{data: cols, rows: g.ncol, cols: ld, stride: ld}, 0, view(y, o, ld))
		if n > 1 { // y [O, N, Ho·Wo] to d [N, O, Ho·Wo]
			for i := range n {
				for c := range o {
					copy(d[(i*o+c)*g.nout:][:g.nout], y[c*ld+i*g.nout:])
				}
			}
		}
	case ir.OpConv2DInputGrad: // a = dy [N,O,Ho,Wo], b = f [O,C,KH,KW], d = dx
		g := newGeom(ds, bs[2], bs[3], at)
		n, o := ds[0], bs[0]
		ld := n * g.nout
		dy := a
		if n > 1 { // dy [N, O, Ho·Wo] to [O, N, Ho·Wo], one GEMM for every image
			dy = make([]T, o*ld)
			for i := range n {
				for c := range o {
					copy(dy[c*ld+i*g.nout:][:g.nout], a[(i*o+c)*g.nout:])
				}
			}
		}
		cols := make([]T, g.ncol*ld)
		gemm(true, false, view(b, o, g.ncol), mat[T]{data: dy, rows: o, cols: ld, stride: ld}, 0, mat[T]{data: cols, rows: g.ncol, cols: ld, stride: ld})
		for i := range n {
			col2im(g, cols[i*g.nout:], d[i*g.c*g.h*g.w:], ld)
		}
	default: // filter grad: a = x [N,C,H,W], b = dy [N,O,Ho,Wo], d = df [O,C,KH,KW]
		g := newGeom(as, ds[2], ds[3], at)
		cols := make([]T, g.ncol*g.nout)
		o := ds[0]
		for n := range as[0] {
			im2col(g, a[n*g.c*g.h*g.w:], cols, g.nout)
			gemm(false, true, view(b[n*o*g.nout:], o, g.nout), view(cols, g.ncol, g.nout), 1, view(d, o, g.ncol))
		}
	}
}

// Pooling. Windows that reach into the padding ignore it for max (the window always holds
// at least one real element, as the shape rule wants pad < window) and count it as zeros
// for avg, which divides by the full window size (PyTorch's count_include_pad).

func evalPool(op ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	win := at.Ints("window")
	xs := args[0].Type.Shape
	if op == ir.OpAvgPoolGrad {
		xs = out.Type.Shape
	}
	g := newGeom(xs, win[0], win[1], at)
	planes := xs[0] * xs[1]
	if out.F32 != nil {
		pool(op, g, planes, out.F32, args[0].F32, operand(args, 1).F32)
	} else {
		pool(op, g, planes, out.F64, args[0].F64, operand(args, 1).F64)
	}
	return nil
}

// operand returns args[i], or an empty tensor when the op has fewer operands.
func operand(args []*Tensor, i int) *Tensor {
	if i < len(args) {
		return args[i]
	}
	return &Tensor{}
}

// pool runs one pooling op over planes (n, c) images: a is the op's first operand (x, or
// dy for avg_pool_grad) and dy the second (max_pool_grad only).
func pool[T float](op ir.Op, g geom, planes int, d, a, dy []T) {
	in, on := g.h*g.w, g.nout
	size := T(g.kh * g.kw)
	for p := range planes {
		var x, y []T // the plane read and the plane written
		switch op {
		case ir.OpMaxPool, ir.OpAvgPool:
			x, y = a[p*in:][:in], d[p*on:][:on]
		case ir.OpMaxPoolGrad:
			x, y = a[p*in:][:in], d[p*in:][:in]
		default: // avg_pool_grad reads dy, writes dx
			x, y = a[p*on:][:on], d[p*in:][:in]
		}
		for oi := range g.ho {
			for oj := range g.wo {
				o := oi*g.wo + oj
				i0, i1, j0, j1 := g.bounds(oi, oj)
				switch op {
				case ir.OpMaxPool:
					y[o] = x[argmax(x, g.w, i0, i1, j0, j1)]
				case ir.OpMaxPoolGrad:
					y[argmax(x, g.w, i0, i1, j0, j1)] += dy[p*on+o]
				case ir.OpAvgPool:
					var s T
					for i := i0; i < i1; i++ {
						for _, v := range x[i*g.w+j0 : i*g.w+j1] {
							s += v
						}
					}
					y[o] = s / size
				case ir.OpAvgPoolGrad:
					v := x[o] / size
					for i := i0; i < i1; i++ {
						for j := i*g.w + j0; j < i*g.w+j1; j++ {
							y[j] += v
						}
					}
				}
			}
		}
	}
}

// bounds gives the rows [i0, i1) and columns [j0, j1) of the real (unpadded) elements of
// output (oi, oj)'s window.
func (g geom) bounds(oi, oj int) (i0, i1, j0, j1 int) {
	i0, j0 = oi*g.sh-g.ph, oj*g.sw-g.pw
	return max(i0, 0), min(i0+g.kh, g.h), max(j0, 0), min(j0+g.kw, g.w)
}

// argmax is the flat index of the first largest element of a window of the plane x (row
// length w): the element the forward max came from and its gradient goes to. NaN counts
// as largest, so it propagates.
func argmax[T float](x []T, w, i0, i1, j0, j1 int) int {
	best := i0*w + j0
	for i := i0; i < i1; i++ {
		for j := i*w + j0; j < i*w+j1; j++ {
			if v := x[j]; v > x[best] || (v != v && x[best] == x[best]) {
				best = j
			}
		}
	}
	return best
}
