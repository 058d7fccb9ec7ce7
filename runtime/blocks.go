package runtime

import (
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// Block copies move rectangular blocks between row-major tensors: loads slice a feed,
// stores assemble results, and the collectives split and concatenate along an axis. They
// move storage as it is (no dtype conversion), so they are exact for every dtype.

// copyBlock copies the block of extent ext starting at srcOff in src to dstOff in dst. The
// caller has checked that the block fits both; dtypes share a storage slice.
func copyBlock(dst *kernels.Tensor, dstOff []int, src *kernels.Tensor, srcOff []int, ext ir.Shape) {
	switch {
	case src.F32 != nil:
		copyRuns(dst.F32, dst.Type.Shape, dstOff, src.F32, src.Type.Shape, srcOff, ext)
	case src.F64 != nil:
		copyRuns(dst.F64, dst.Type.Shape, dstOff, src.F64, src.Type.Shape, srcOff, ext)
	default:
		copyRuns(dst.Int, dst.Type.Shape, dstOff, src.Int, src.Type.Shape, srcOff, ext)
	}
}

// copyRuns copies the block one contiguous run at a time, walking the other dims with an
// odometer. A run is the last dim, and with it every trailing dim that the block covers
// whole in both tensors (a whole tensor is one run).
func copyRuns[T any](dst []T, dshape ir.Shape, doff []int, src []T, sshape ir.Shape, soff []int, ext ir.Shape) {
	if ext.NumElements() == 0 {
		return
	}
	rank := len(ext)
	if rank == 0 {
		dst[0] = src[0]
		return
	}
	k := rank - 1 // the run spans dims k.. ; idx[k:] stay 0
	run := ext[k]
	for k > 0 && ext[k] == sshape[k] && ext[k] == dshape[k] && soff[k] == 0 && doff[k] == 0 {
		k--
		run *= ext[k]
	}
	idx := make([]int, rank) // position inside the block
	for {
		copy(dst[flat(dshape, doff, idx):], src[flat(sshape, soff, idx):][:run])
		d := k - 1
		for ; d >= 0; d-- {
			if idx[d]++; idx[d] < ext[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// forBlock calls fn with the flat index in a tensor of the given shape and the flat index
// inside the block, for every element of the block of extent ext at off, in row-major
// order, until fn returns false. The block fits the shape.
func forBlock(shape ir.Shape, off []int, ext ir.Shape, fn func(di, si int) bool) {
	n := int(ext.NumElements())
	idx := make([]int, len(ext))
	for si := 0; si < n; si++ {
		if !fn(flat(shape, off, idx), si) {
			return
		}
		for d := len(ext) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < ext[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// flat is the row-major index of off+idx in a tensor of the given shape.
func flat(shape ir.Shape, off, idx []int) int {
	i := 0
	for d, n := range shape {
		i = i*n + off[d] + idx[d]
	}
	return i
}

// fits reports whether the block of extent ext at off lies inside shape.
func fits(shape ir.Shape, off []int, ext ir.Shape) bool {
	if len(off) != len(shape) || len(ext) != len(shape) {
		return false
	}
	for d := range shape {
		if off[d] < 0 || off[d]+ext[d] > shape[d] {
			return false
		}
	}
	return true
}

// inside reports whether the block of extent ext at off lies inside the block of extent
// bext at boff (all of one rank).
func inside(off []int, ext ir.Shape, boff []int, bext ir.Shape) bool {
	if len(off) != len(boff) || len(ext) != len(bext) || len(off) != len(ext) {
		return false
	}
	for k := range off {
		if off[k] < boff[k] || off[k]+ext[k] > boff[k]+bext[k] {
			return false
		}
	}
	return true
}

// sliceBlock returns the block of x of extent ext at off, or an error when it does not fit.
func sliceBlock(x *kernels.Tensor, off []int, ext ir.Shape) (*kernels.Tensor, error) {
	if !fits(x.Type.Shape, off, ext) {
		return nil, fmt.Errorf("block %v at offsets %v does not fit %s", ext, off, x.Type)
	}
	out := kernels.New(ir.Type{DType: x.Type.DType, Shape: ext})
	copyBlock(out, make([]int, len(ext)), x, off, ext)
	return out, nil
}

// split cuts x into n equal blocks along axis. The caller has checked that n divides it.
func split(x *kernels.Tensor, axis, n int) []*kernels.Tensor {
	ext := x.Type.Shape.Clone()
	ext[axis] /= n
	off := make([]int, len(ext))
	parts := make([]*kernels.Tensor, n)
	for k := range parts {
		off[axis] = k * ext[axis]
		parts[k], _ = sliceBlock(x, off, ext)
	}
	return parts
}

// concat joins parts of one dtype along axis; they agree on every other dim.
func concat(parts []*kernels.Tensor, axis int) *kernels.Tensor {
	shape := parts[0].Type.Shape.Clone()
	for _, p := range parts[1:] {
		shape[axis] += p.Type.Shape[axis]
	}
	out := kernels.New(ir.Type{DType: parts[0].Type.DType, Shape: shape})
	off := make([]int, len(shape))
	zero := make([]int, len(shape))
	for _, p := range parts {
		copyBlock(out, off, p, zero, p.Type.Shape)
		off[axis] += p.Type.Shape[axis]
	}
	return out
}

// chunks views x as a vector of its elements (sharing storage) cut into n nearly equal runs: chunk r holds elements [r·L/n, (r+1)·L/n).
func chunks(x *kernels.Tensor, n int) []*kernels.Tensor {
	l := x.Len()
	parts := make([]*kernels.Tensor, n)
	for r := range parts {
		lo, hi := r*l/n, (r+1)*l/n
		p := &kernels.Tensor{Type: ir.Type{DType: x.Type.DType, Shape: ir.Shape{hi - lo}}}
		switch {
		case x.F32 != nil:
			p.F32 = x.F32[lo:hi:hi]
		case x.F64 != nil:
			p.F64 = x.F64[lo:hi:hi]
		default:
			p.Int = x.Int[lo:hi:hi]
		}
		parts[r] = p
	}
	return parts
}

// tensorBytes is the size of x by its dtype (f16 counts 2 bytes though stored as f32).
func tensorBytes(x *kernels.Tensor) int64 { return x.Type.Bytes() }
