package mesh

import "fmt"

// A NotDivisibleError says that a spec splits a tensor dim over mesh axes
// whose device count does not divide the dim's size. mesh never pads: the
// caller should fall back to keeping that dim replicated.
type NotDivisibleError struct {
	Dim    int     // tensor dim
	Size   int     // its global size
	Axes   AxisSet // the mesh axes it is split on
	Shards int     // how many pieces that makes
}

func (e *NotDivisibleError) Error() string {
	where := "mesh axis " + e.Axes.Digits()
	if e.Axes == AxesBoth {
		where = "mesh axes 0 and 1"
	}
	return fmt.Sprintf("mesh: dim %d of size %d cannot be split on %s into %d shards",
		e.Dim, e.Size, where, e.Shards)
}

// ShardIndex returns which block of a dim split on axes device (i, j)
// holds: i on axis 0, j on axis 1, i*n1+j on both (axis 0 major), 0 when
// the dim is replicated.
func (m *LogicalMesh) ShardIndex(axes AxisSet, i, j int) int {
	switch axes {
	case Axis0:
		return i
	case Axis1:
		return j
	case AxesBoth:
		return i*m.Shape[1] + j
	}
	return 0
}

// LocalShape returns the shape of the block each device holds of a tensor of
// the given global shape laid out as s. Every split dim must divide evenly;
// otherwise the error is a *NotDivisibleError naming the dim and axes. A
// partial value has the same local shape as its non-partial counterpart.
func (m *LogicalMesh) LocalShape(shape []int, s Spec) ([]int, error) {
	if len(shape) != len(s.Dims) {
		return nil, fmt.Errorf("mesh: spec %s has %d dims, shape %v has %d", s, len(s.Dims), shape, len(shape))
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	local := make([]int, len(shape))
	for d, size := range shape {
		n := m.AxisSize(s.Dims[d])
		if size < 0 || size%n != 0 {
			return nil, &NotDivisibleError{Dim: d, Size: size, Axes: s.Dims[d], Shards: n}
		}
		local[d] = size / n
	}
	return local, nil
}

// LocalBytes returns the bytes one device holds of a tensor of the given
// shape and element size laid out as s (see LocalShape for the errors).
func (m *LogicalMesh) LocalBytes(shape []int, elemBytes int, s Spec) (int64, error) {
	local, err := m.LocalShape(shape, s)
	if err != nil {
		return 0, err
	}
	return numBytes(local, elemBytes), nil
}

func numBytes(shape []int, elemBytes int) int64 {
	n := int64(elemBytes)
	for _, x := range shape {
		n *= int64(x)
	}
	return n
}

// LocalOffsets returns where the block of device (i, j) starts in the global
// tensor, dim by dim; the block's extent is LocalShape.
func (m *LogicalMesh) LocalOffsets(shape []int, s Spec, i, j int) ([]int, error) {
	local, err := m.LocalShape(shape, s)
	if err != nil {
		return nil, err
	}
	off := make([]int, len(shape))
	for d := range shape {
		off[d] = m.ShardIndex(s.Dims[d], i, j) * local[d]
	}
	return off, nil
}
