package ir

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Shape is the list of a tensor's dimension sizes; a scalar has an empty shape.
type Shape []int

// NumElements is the product of the dims (1 for a scalar).
func (s Shape) NumElements() int64 {
	n := int64(1)
	for _, d := range s {
		n *= int64(d)
	}
	return n
}

// MaxElements bounds the element count of every tensor of a graph: 2^50 is far past any
// model autopar can place (GPT-3's largest weight has ~2^30) and keeps every element and byte
// count (at most 8 bytes an element) far inside int64, so that no product of dims wraps.
const MaxElements = 1 << 50

// CheckedElements is NumElements computed without wrapping: ok is false when a dim is
// negative or the product passes MaxElements.
func (s Shape) CheckedElements() (n int64, ok bool) {
	p := uint64(1)
	for _, d := range s {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(d))
		if hi != 0 || lo > MaxElements {
			return 0, false
		}
		p = lo
	}
	return int64(p), true
}

// checkResultSize reports a result type of op whose element count passes MaxElements.
func checkResultSize(op string, t Type) error {
	if _, ok := t.Shape.CheckedElements(); !ok {
		return fmt.Errorf("%s: result %s has more than 2^50 elements, beyond any tensor autopar can place", op, t)
	}
	return nil
}

// Rank is the number of dims.
func (s Shape) Rank() int { return len(s) }

// Equal reports whether two shapes have the same dims.
func (s Shape) Equal(t Shape) bool { return slices.Equal(s, t) }

// Clone returns a copy that does not alias s.
func (s Shape) Clone() Shape { return slices.Clone(s) }

func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(d))
	}
	b.WriteByte(']')
	return b.String()
}

// Type is a tensor type: dtype and shape, printed as f32[8,512].
type Type struct {
	DType DType
	Shape Shape
}

func (t Type) String() string { return t.DType.String() + t.Shape.String() }

// Bytes is the size of a tensor of this type.
func (t Type) Bytes() int64 { return t.Shape.NumElements() * int64(t.DType.Size()) }

// Equal reports whether two types have the same dtype and shape.
func (t Type) Equal(u Type) bool { return t.DType == u.DType && t.Shape.Equal(u.Shape) }
