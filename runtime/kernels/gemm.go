package kernels

import (
	"sync/atomic"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
)

// mat is a row-major matrix view of a slice: rows × cols with the given row stride.
type mat[T number] struct {
	data       []T
	rows, cols int
	stride     int
}

func view[T number](data []T, rows, cols int) mat[T] {
	return mat[T]{data: data[:rows*cols], rows: rows, cols: cols, stride: max(cols, 1)}
}

// gemm computes c = op(a)·op(b) + beta·c, where op transposes when ta (tb) is set: gonum's
// float32 BLAS for float32, float64 BLAS for float64, and a plain loop for integers, which
// BLAS does not cover. beta is 0 (overwrite) or 1 (accumulate).
func gemm[T number](ta, tb bool, a, b mat[T], beta T, c mat[T]) {
	if oneCore.Load() > 0 && blocks(c.rows)*blocks(c.cols) >= minParBlock {
		// What gonum's parallel split computes, on this goroutine: per 64×64 block of C,
		// the blocks of the shared dimension accumulated in order (each call is one block,
		// which gonum runs serially), so the results are bit-identical.
		k := a.cols
		if ta {
			k = a.rows
		}
		for i := 0; i < c.rows; i += gemmBlock {
			for j := 0; j < c.cols; j += gemmBlock {
				ri, cj := min(gemmBlock, c.rows-i), min(gemmBlock, c.cols-j)
				ct := mat[T]{data: c.data[i*c.stride+j:], rows: ri, cols: cj, stride: c.stride}
				if k == 0 {
					gemm(ta, tb, rowsOf(a, ta, i, ri, 0, 0), colsOf(b, tb, j, cj, 0, 0), beta, ct)
				}
				for l := 0; l < k; l += gemmBlock {
					lk, bl := min(gemmBlock, k-l), T(1)
					if l == 0 {
						bl = beta
					}
					gemm(ta, tb, rowsOf(a, ta, i, ri, l, lk), colsOf(b, tb, j, cj, l, lk), bl, ct)
				}
			}
		}
		return
	}
	switch a := any(a).(type) {
	case mat[float32]:
		b, c := any(b).(mat[float32]), any(c).(mat[float32])
		blas32.Gemm(trans(ta), trans(tb), 1, blas32.General{Rows: a.rows, Cols: a.cols, Stride: a.stride, Data: a.data},
			blas32.General{Rows: b.rows, Cols: b.cols, Stride: b.stride, Data: b.data}, float32(beta),
			blas32.General{Rows: c.rows, Cols: c.cols, Stride: c.stride, Data: c.data})
	case mat[float64]:
		b, c := any(b).(mat[float64]), any(c).(mat[float64])
		blas64.Gemm(trans(ta), trans(tb), 1, blas64.General{Rows: a.rows, Cols: a.cols, Stride: a.stride, Data: a.data},
			blas64.General{Rows: b.rows, Cols: b.cols, Stride: b.stride, Data: b.data}, float64(beta),
			blas64.General{Rows: c.rows, Cols: c.cols, Stride: c.stride, Data: c.data})
	default:
		gemmLoop(ta, tb, any(a).(mat[int64]), any(b).(mat[int64]), int64(beta), any(c).(mat[int64]))
	}
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// gemmLoop is gemm for integers, in i-k-j order so the inner loop runs along rows.
func gemmLoop(ta, tb bool, a, b mat[int64], beta int64, c mat[int64]) {
	at := func(m mat[int64], t bool, i, j int) int64 {
		if t {
			return m.data[j*m.stride+i]
		}
		return m.data[i*m.stride+j]
	}
	k := a.cols
	if ta {
		k = a.rows
	}
	for i := range c.rows {
		row := c.data[i*c.stride : i*c.stride+c.cols]
		if beta == 0 {
			clear(row)
		}
		for p := range k {
			x := at(a, ta, i, p)
			if x == 0 {
				continue
			}
			for j := range row {
				row[j] += x * at(b, tb, p, j)
			}
		}
	}
}

// oneCore counts the callers of OneCore that have not released it: while it is positive,
// contractions run on the calling goroutine only.
var oneCore atomic.Int32

// gonum's Gemm splits a call over GOMAXPROCS goroutines when C has at least minParBlock
// blocks of gemmBlock×gemmBlock (blas/gonum's blockSize and minParBlock).
const gemmBlock, minParBlock = 64, 4

func blocks(n int) int { return (n + gemmBlock - 1) / gemmBlock }

// OneCore makes every contraction (matmul, einsum, conv2d) run on the goroutine that
// calls it, as one core, instead of spreading a large one over the machine's cores as
// gonum does, until the returned release is called: the runtime uses it while it measures
// devices in per-thread CPU time (runtime.Options.CPUTime), so that a kernel's time is
// all on its device's thread. Results are bit-identical either way. Calls nest.
func OneCore() (release func()) {
	oneCore.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			oneCore.Add(-1)
		}
	}
}

// rowsOf is rows [i, i+n) and columns [l, l+nk) of op(m) (m transposed when t); nk 0:
// every column.
func rowsOf[T number](m mat[T], t bool, i, n, l, nk int) mat[T] {
	if t {
		if nk == 0 {
			nk = m.rows
		}
		return mat[T]{data: m.data[l*m.stride+i:], rows: nk, cols: n, stride: m.stride}
	}
	if nk == 0 {
		nk = m.cols
	}
	return mat[T]{data: m.data[i*m.stride+l:], rows: n, cols: nk, stride: m.stride}
}

// colsOf is rows [l, l+nk) and columns [j, j+n) of op(m) (m transposed when t); nk 0: every
// row. Columns of op(m) are rows of its transpose, stored the same way: rowsOf with t
// flipped.
func colsOf[T number](m mat[T], t bool, j, n, l, nk int) mat[T] {
	return rowsOf(m, !t, j, n, l, nk)
}
