package ir

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustAppend(t *testing.T, g *Graph, op Op, name string, args []ValueID, at Attrs) ValueID {
	t.Helper()
	id, err := g.Append(op, name, args, at, Pos{"t.ir", len(g.Values) + 1, 1})
	require.NoError(t, err)
	return id
}

func TestBuildPrintVerify(t *testing.T) {
	g := NewGraph("mlp")
	x, err := g.Declare(OpInput, "x", Type{F32, Shape{8, 4}}, 0, Pos{"t.ir", 1, 1})
	require.NoError(t, err)
	w, err := g.Declare(OpParam, "w", Type{F32, Shape{4, 3}}, -1, Pos{"t.ir", 2, 1})
	require.NoError(t, err)
	h := mustAppend(t, g, OpMatMul, "h", []ValueID{x, w}, nil)
	r := mustAppend(t, g, OpReduceSum, "r", []ValueID{h}, Attrs{}.With("axes", []int{0, 1}))
	g.AddOutput(r, Pos{})
	require.NoError(t, Verify(g))
	assert.Equal(t, "graph mlp\ninput x: f32[8,4] batch=0\nparam w: f32[4,3]\nh = matmul x, w\nr = reduce_sum h axes=[0,1]\noutput r\n", g.String())
	assert.Equal(t, "a b, b c -> a c", g.Dims(h).String())
	assert.Equal(t, 2.0*8*4*3, g.FLOPs(h))
}

func TestShapeErrorNamesOperands(t *testing.T) {
	g := NewGraph("")
	h, _ := g.Declare(OpParam, "h", Type{F32, Shape{8, 512}}, -1, Pos{})
	w2, _ := g.Declare(OpParam, "w2", Type{F32, Shape{1024, 256}}, -1, Pos{})
	_, err := g.Append(OpMatMul, "y", []ValueID{h, w2}, nil, Pos{"gpt.ir", 14, 9})
	require.Error(t, err)
	assert.Equal(t, "gpt.ir:14:9: matmul: inner dims differ: h is f32[8,512] but w2 is f32[1024,256]", err.Error())
}

func TestDimsSignatures(t *testing.T) {
	g := NewGraph("")
	x, _ := g.Declare(OpInput, "x", Type{F32, Shape{4, 6}}, 0, Pos{})
	b, _ := g.Declare(OpParam, "b", Type{F32, Shape{6}}, -1, Pos{})
	cases := []struct {
		op   Op
		args []ValueID
		at   Attrs
		want string
	}{
		{OpAdd, []ValueID{x, b}, nil, "a b, b -> a b"},
		{OpSoftmax, []ValueID{x}, Attrs{}.With("axis", 1), "a b* -> a b*"},
		{OpReduceSum, []ValueID{x}, Attrs{}.With("axes", []int{1}), "a b -> a"},
		{OpTranspose, []ValueID{x}, Attrs{}.With("perm", []int{1, 0}), "a b -> b a"},
		{OpReshape, []ValueID{x}, Attrs{}.With("shape", []int{24}), "a _ -> a"},
		{OpReshape, []ValueID{x}, Attrs{}.With("shape", []int{2, 2, 6}), "a b -> a c* b"},
		{OpEinsum, []ValueID{x, x}, Attrs{}.With("spec", "ij,ik->jk"), "a b, a c -> b c"},
	}
	for i, c := range cases {
		id := mustAppend(t, g, c.op, g.FreshName("v"), c.args, c.at)
		assert.Equal(t, c.want, g.Dims(id).String(), "case %d (%s)", i, c.op)
	}
}

func TestCheckedElementsNeverWraps(t *testing.T) {
	n, ok := Shape{1 << 25, 1 << 25}.CheckedElements()
	assert.True(t, ok)
	assert.Equal(t, int64(MaxElements), n)
	for _, s := range []Shape{
		{1 << 25, 1 << 25, 2},          // just past 2^50
		{4611686018427387905, 4},       // 2^64+4 wraps to 4 in NumElements
		{1 << 32, 1 << 32, 1 << 32, 1}, // wraps to 0
		{-2, 8},
	} {
		_, ok := s.CheckedElements()
		assert.False(t, ok, "%v", s)
	}
}

// Every result type is bounded, whatever builds it (a rebatch, a builder, a program).
func TestAppendRefusesResultsPastMaxElements(t *testing.T) {
	g := NewGraph("g")
	s, err := g.Declare(OpParam, "s", Type{F32, Shape{4}}, -1, Pos{})
	require.NoError(t, err)
	_, err = g.Append(OpReshape, "r", []ValueID{s}, Attrs{}.With("shape", []int{4611686018427387905, 4}), Pos{})
	require.ErrorContains(t, err, "reshape: result f32[4611686018427387905,4] has more than 2^50 elements")
	_, err = g.Declare(OpParam, "big", Type{F64, Shape{1 << 40, 1 << 20}}, -1, Pos{})
	require.ErrorContains(t, err, "has more than 2^50 elements")
}

// TestTableFacts checks the per-op facts against each other: a heavy op is a contraction
// or convolution whose partials sum, a follower is never heavy, a leaf has no facts, and
// an op with a partial kind has a label its dims signature contracts (here on a small
// instance of each).
func TestTableFacts(t *testing.T) {
	for _, op := range AllOps() {
		d := op.Def()
		if d.Heavy {
			assert.Equal(t, PartialSum, d.Partial, "%s is heavy: its partials must sum", op)
			assert.False(t, d.Follower, "%s is heavy and a follower", op)
		}
		if d.Category == CatLeaf {
			assert.False(t, d.Heavy || d.Follower || d.Partial != PartialNone, "leaf %s has per-op facts", op)
		}
	}
	assert.True(t, PartialSum.Lowerable())
	assert.False(t, PartialMax.Lowerable())
	assert.False(t, PartialNone.Lowerable())
	assert.Equal(t, "max", OpReduceMax.Def().Partial.String())
	// An op whose dims contract an unfixed label must say how its partials combine.
	x := Type{F32, Shape{4, 6}}
	ids := Type{I32, Shape{4}}
	for _, c := range []struct {
		op   Op
		args []Type
		at   Attrs
	}{
		{OpMatMul, []Type{x, {F32, Shape{6, 2}}}, nil},
		{OpReduceSum, []Type{x}, Attrs{}.With("axes", []int{1})},
		{OpReduceMax, []Type{x}, Attrs{}.With("axes", []int{1})},
		{OpGather, []Type{{F32, Shape{10, 3}}, ids}, nil},
		{OpScatterAdd, []Type{ids, {F32, Shape{4, 3}}}, Attrs{}.With("rows", 10)},
		{OpSoftmax, []Type{x}, Attrs{}.With("axis", 1)},
		{OpSparseCrossEntropy, []Type{x, ids}, nil},
		{OpRelu, []Type{x}, nil},
	} {
		args := make([]Arg, len(c.args))
		for i, a := range c.args {
			args[i] = Arg{Name: "a", Type: a}
		}
		res, at, err := InferType(c.op, args, c.at)
		require.NoError(t, err, c.op.String())
		dims := c.op.Def().Dims(c.args, at, res)
		free := 0
		for _, l := range dims.Contracted() {
			if !dims.Fixed[l] {
				free++
			}
		}
		assert.Equal(t, free > 0, c.op.Def().Partial != PartialNone, "%s: dims %s, partial %s", c.op, dims, c.op.Def().Partial)
	}
}

// batch_norm's group: statistics per block of rows of dim 0. A block smaller than the batch
// keeps the batch dim whole (its blocks are not synchronized across devices); the whole dim,
// or 0, is the plain batch_norm, whose batch may be split. A group that does not divide the
// batch is refused.
func TestBatchNormGroup(t *testing.T) {
	g := NewGraph("")
	x, _ := g.Declare(OpInput, "x", Type{F32, Shape{8, 3, 2, 2}}, 0, Pos{})
	c, _ := g.Declare(OpParam, "c", Type{F32, Shape{3}}, -1, Pos{})
	plain := mustAppend(t, g, OpBatchNorm, "plain", []ValueID{x, c, c}, nil)
	assert.Equal(t, "a b c* d*, b, b -> a b c* d*", g.Dims(plain).String())
	grouped := mustAppend(t, g, OpBatchNorm, "grouped", []ValueID{x, c, c}, Attrs{}.With("group", 4))
	assert.Equal(t, "a* b c* d*, b, b -> a* b c* d*", g.Dims(grouped).String())
	whole := mustAppend(t, g, OpBatchNorm, "whole", []ValueID{x, c, c}, Attrs{}.With("group", 8))
	assert.Equal(t, "a b c* d*, b, b -> a b c* d*", g.Dims(whole).String())
	assert.Contains(t, g.String(), "grouped = batch_norm x, c, c group=4\n")
	assert.Contains(t, g.String(), "plain = batch_norm x, c, c\n")
	_, err := g.Append(OpBatchNorm, "bad", []ValueID{x, c, c}, Attrs{}.With("group", 3), Pos{"t.ir", 9, 1})
	require.EqualError(t, err, "t.ir:9:1: batch_norm: group 3 must be a positive divisor of dim 0 of x (f32[8,3,2,2]), or 0 for the whole dim")
	_, err = g.Append(OpBatchNorm, "neg", []ValueID{x, c, c}, Attrs{}.With("group", -1), Pos{"t.ir", 10, 1})
	require.ErrorContains(t, err, "group -1 must be a positive divisor")
}
