package kernels

import (
	"fmt"

	"github.com/autopar/autopar/ir"
)

// Dropout's mask is a pure function of (seed, global element index): a counter-based hash,
// not a stateful generator. A device holding one shard of a tensor therefore draws exactly
// the mask elements the serial interpreter draws for the same elements, whatever the
// sharding, as long as it passes each element's index in the whole (unsharded) tensor.

// splitmix64 is the finalizer of Steele et al.'s SplitMix64: a bijective 64-bit mix that
// turns consecutive counters into independent-looking words.
func splitmix64(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// DropoutKeep reports whether dropout with the given seed and rate keeps the element at
// globalIndex, the row-major flat index of the element in the whole, unsharded tensor.
// The probability of keeping is 1 - rate.
func DropoutKeep(seed uint64, globalIndex int, rate float64) bool {
	z := splitmix64(seed ^ splitmix64(uint64(globalIndex)))
	u := float64(z>>11) * 0x1p-53 // uniform in [0, 1)
	return u >= rate
}

func evalDropout(_ ir.Op, at ir.Attrs, out *Tensor, args []*Tensor) error {
	s := args[0].Type.Shape
	dropoutInto(out, args[0], at.Float("rate"), uint64(at.Int("seed")), s, make([]int, len(s)))
	return nil
}

// DropoutShard applies dropout(rate, seed) to x, a shard of a tensor of shape global that
// starts at offset (one entry per dim) within it: the mask of each element is drawn at its
// global index, so the shards of a sharded dropout put together equal the serial dropout.
// Kept elements are scaled by 1/(1-rate).
func DropoutShard(x *Tensor, rate float64, seed uint64, global ir.Shape, offset []int) (*Tensor, error) {
	s := x.Type.Shape
	if len(global) != len(s) || len(offset) != len(s) {
		return nil, fmt.Errorf("dropout: shard %s, global shape %s and offset %v differ in rank", s, global, offset)
	}
	for i := range s {
		if offset[i] < 0 || offset[i]+s[i] > global[i] {
			return nil, fmt.Errorf("dropout: shard %s at offset %v does not fit in %s", s, offset, global)
		}
	}
	if !x.Type.DType.IsFloat() || !(rate >= 0 && rate < 1) {
		return nil, fmt.Errorf("dropout: want a float tensor and rate in [0, 1), got %s and %g", x.Type, rate)
	}
	out := New(x.Type)
	dropoutInto(out, x, rate, seed, global, offset)
	roundTo(out.Type.DType, out.F32)
	return out, nil
}

// dropoutInto fills out with the dropout of x, a block of global at offset.
func dropoutInto(out, x *Tensor, rate float64, seed uint64, global ir.Shape, offset []int) {
	gs := contiguous(global)
	base := 0
	for i, o := range offset {
		base += o * gs[i]
	}
	w := stridedWalk(x.Type.Shape, gs, base)
	switch {
	case x.F32 != nil:
		dropout(w, out.F32, x.F32, rate, seed)
	default:
		dropout(w, out.F64, x.F64, rate, seed)
	}
}

func dropout[T float](w *walk, d, x []T, rate float64, seed uint64) {
	n, sg := w.n(), w.inner(1)
	scale := T(1 / (1 - rate))
	w.rows(func(off []int) {
		g := off[1]
		for j := off[0]; j < off[0]+n; j++ {
			if DropoutKeep(seed, g, rate) {
				d[j] = x[j] * scale
			}
			g += sg
		}
	})
}
