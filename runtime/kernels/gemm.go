package kernels

import (
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
