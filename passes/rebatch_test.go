package passes

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// attentionLike builds [B,S,H] → [B·S,H] → matmul → [B,S,2,H/2] → transpose → mean loss,
// the reshape traffic of a transformer's head split.
func attentionLike(t *testing.T, b, s, h int) *ir.Graph {
	g := ir.NewGraph("heads")
	must := func(id ir.ValueID, err error) ir.ValueID {
		t.Helper()
		require.NoError(t, err)
		return id
	}
	f32 := func(shape ...int) ir.Type { return ir.Type{DType: ir.F32, Shape: shape} }
	x := must(g.Declare(ir.OpInput, "x", f32(b, s, h), 0, ir.Pos{}))
	w := must(g.Declare(ir.OpParam, "w", f32(h, h), -1, ir.Pos{}))
	flat := must(g.Append(ir.OpReshape, "flat", []ir.ValueID{x}, ir.Attrs{}.With("shape", []int{b * s, h}), ir.Pos{}))
	y := must(g.Append(ir.OpMatMul, "y", []ir.ValueID{flat, w}, nil, ir.Pos{}))
	heads := must(g.Append(ir.OpReshape, "heads", []ir.ValueID{y}, ir.Attrs{}.With("shape", []int{b, s, 2, h / 2}), ir.Pos{}))
	tr := must(g.Append(ir.OpTranspose, "tr", []ir.ValueID{heads}, ir.Attrs{}.With("perm", []int{0, 2, 1, 3}), ir.Pos{}))
	bc := must(g.Append(ir.OpBroadcast, "bc", []ir.ValueID{tr}, ir.Attrs{}.With("dims", []int{1, 2, 3, 4}).With("shape", []int{3, b, 2, s, h / 2}), ir.Pos{}))
	loss := must(g.Append(ir.OpReduceMean, "loss", []ir.ValueID{bc}, ir.Attrs{}.With("axes", []int{0, 1, 2, 3, 4}), ir.Pos{}))
	g.AddOutput(loss, ir.Pos{})
	require.NoError(t, ir.Verify(g))
	return g
}

func TestRebatchFollowsTheBatchThroughReshapes(t *testing.T) {
	g := attentionLike(t, 8, 4, 6)
	n, err := BatchSize(g)
	require.NoError(t, err)
	assert.Equal(t, 8, n)
	mb, err := Rebatch(g, 2)
	require.NoError(t, err)
	require.NoError(t, ir.Verify(mb))
	want := map[string]string{
		"x": "f32[2,4,6]", "flat": "f32[8,6]", "y": "f32[8,6]", "heads": "f32[2,4,2,3]",
		"tr": "f32[2,2,4,3]", "bc": "f32[3,2,2,4,3]", "w": "f32[6,6]", "loss": "f32[]",
	}
	for name, typ := range want {
		id, ok := mb.Lookup(name)
		require.True(t, ok, name)
		assert.Equal(t, typ, mb.Value(id).Type.String(), name)
	}
	again, err := BatchSize(mb)
	require.NoError(t, err)
	assert.Equal(t, 2, again)
}

func TestRebatchErrors(t *testing.T) {
	g := attentionLike(t, 8, 4, 6)
	_, err := Rebatch(g, 0)
	require.ErrorContains(t, err, "must be at least 1")
	big, err := Rebatch(g, 24)
	require.NoError(t, err)
	flat, _ := big.Lookup("flat")
	assert.Equal(t, "f32[96,6]", big.Value(flat).Type.String())

	// A reshape that moves the batch into the middle of another dim cannot be rescaled.
	g = ir.NewGraph("bad")
	x, err := g.Declare(ir.OpInput, "x", ir.Type{DType: ir.F32, Shape: ir.Shape{4, 6}}, 0, ir.Pos{Line: 2, Col: 1})
	require.NoError(t, err)
	tr, err := g.Append(ir.OpTranspose, "tr", []ir.ValueID{x}, ir.Attrs{}.With("perm", []int{1, 0}), ir.Pos{Line: 3})
	require.NoError(t, err)
	r, err := g.Append(ir.OpReshape, "r", []ir.ValueID{tr}, ir.Attrs{}.With("shape", []int{4, 6}), ir.Pos{Line: 4, Col: 1})
	require.NoError(t, err)
	g.AddOutput(r, ir.Pos{})
	_, err = Rebatch(g, 2)
	require.ErrorContains(t, err, "cannot micro-batch")
	require.ErrorContains(t, err, "r")

	_, err = BatchSize(ir.NewGraph("none"))
	require.ErrorContains(t, err, "no data input with a batch dim")
}

// MoE forms token groups by splitting the batch over two dims ([B,T,H] → [B/k,k,T,H]); the
// micro-batch rescales the major part, and must fill whole groups.
func TestRebatchSplitBatch(t *testing.T) {
	g := ir.NewGraph("groups")
	must := func(id ir.ValueID, err error) ir.ValueID {
		t.Helper()
		require.NoError(t, err)
		return id
	}
	x := must(g.Declare(ir.OpInput, "x", ir.Type{DType: ir.F32, Shape: ir.Shape{8, 3, 5}}, 0, ir.Pos{}))
	split := must(g.Append(ir.OpReshape, "split", []ir.ValueID{x}, ir.Attrs{}.With("shape", []int{4, 2, 3, 5}), ir.Pos{}))
	groups := must(g.Append(ir.OpReshape, "groups", []ir.ValueID{split}, ir.Attrs{}.With("shape", []int{4, 6, 5}), ir.Pos{}))
	back := must(g.Append(ir.OpReshape, "back", []ir.ValueID{groups}, ir.Attrs{}.With("shape", []int{8, 15}), ir.Pos{}))
	loss := must(g.Append(ir.OpReduceSum, "loss", []ir.ValueID{back}, ir.Attrs{}.With("axes", []int{0, 1}), ir.Pos{}))
	g.AddOutput(loss, ir.Pos{})

	mb, err := Rebatch(g, 4)
	require.NoError(t, err)
	for name, typ := range map[string]string{"x": "f32[4,3,5]", "split": "f32[2,2,3,5]", "groups": "f32[2,6,5]", "back": "f32[4,15]"} {
		id, _ := mb.Lookup(name)
		assert.Equal(t, typ, mb.Value(id).Type.String(), name)
	}
	_, err = Rebatch(g, 3)
	require.ErrorContains(t, err, "splits the batch into groups of 2, which batch 3 does not fill")
}

// Per-micro-batch batch norm: PerMicrobatchStats gives every batch_norm the rows of one
// micro-batch as its group; the graph of one micro-batch is then the plain one (group 0,
// the text Rebatch made before groups existed), and BatchCoupled says which splits keep
// what the graph computes.
func TestPerMicrobatchStats(t *testing.T) {
	g := model(t, "wresnet-tiny")
	n, err := BatchSize(g)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	id, coupled := BatchCoupled(g, 2)
	require.True(t, coupled)
	assert.Equal(t, ir.OpBatchNorm, g.Value(id).Op)
	_, coupled = BatchCoupled(g, 1)
	assert.False(t, coupled, "one micro-batch is the step")

	per, err := PerMicrobatchStats(g, 2)
	require.NoError(t, err)
	bns := 0
	for i := range per.Values {
		if v := &per.Values[i]; v.Op == ir.OpBatchNorm {
			bns++
			assert.Equal(t, 4, v.Attrs.Int("group"), v.Name)
			assert.Equal(t, 0, g.Values[i].Attrs.Int("group"), "the input graph is not modified")
		}
	}
	require.Positive(t, bns)
	assert.Contains(t, per.String(), "group=4")
	again, err := frontend.Parse("per.ir", []byte(per.String()))
	require.NoError(t, err)
	assert.Equal(t, per.String(), again.String(), "the group prints and parses back")

	for b, want := range map[int]bool{2: false, 4: true, 8: true} {
		_, coupled := BatchCoupled(per, b)
		assert.Equal(t, want, coupled, "groups of 4 in %d micro-batches", b)
	}
	fine, err := PerMicrobatchStats(g, 4)
	require.NoError(t, err)
	_, coupled = BatchCoupled(fine, 2)
	assert.False(t, coupled, "micro-batches of 4 hold two whole groups of 2")

	// The micro-batch of the grouped graph is the micro-batch of the plain one.
	mb, err := Rebatch(per, 4)
	require.NoError(t, err)
	plain, err := Rebatch(g, 4)
	require.NoError(t, err)
	assert.Equal(t, plain.String(), mb.String())
	// A bigger batch keeps groups of 4; a micro-batch that cuts a group is refused.
	big, err := Rebatch(per, 16)
	require.NoError(t, err)
	assert.Contains(t, big.String(), "group=4")
	_, err = Rebatch(per, 2)
	require.ErrorContains(t, err, "takes its statistics over groups of 4 rows")

	one, err := PerMicrobatchStats(g, 1)
	require.NoError(t, err)
	assert.Equal(t, g.String(), one.String())
	_, err = PerMicrobatchStats(g, 3)
	require.ErrorContains(t, err, "not divisible by 3 micro-batches")

	_, coupled = BatchCoupled(model(t, "gpt-tiny"), 4)
	assert.False(t, coupled, "a transformer's samples are independent")
}

// A batch_norm whose dim 0 interleaves the batch with another dim holds no micro-batch in
// one block of rows: PerMicrobatchStats refuses it, naming it.
func TestPerMicrobatchStatsMixedBatch(t *testing.T) {
	g := ir.NewGraph("mixed")
	must := func(id ir.ValueID, err error) ir.ValueID {
		t.Helper()
		require.NoError(t, err)
		return id
	}
	x := must(g.Declare(ir.OpInput, "x", ir.Type{DType: ir.F32, Shape: ir.Shape{8, 2, 3}}, 0, ir.Pos{}))
	c := must(g.Declare(ir.OpParam, "c", ir.Type{DType: ir.F32, Shape: ir.Shape{3}}, -1, ir.Pos{}))
	tr := must(g.Append(ir.OpTranspose, "tr", []ir.ValueID{x}, ir.Attrs{}.With("perm", []int{1, 0, 2}), ir.Pos{}))
	flat := must(g.Append(ir.OpReshape, "flat", []ir.ValueID{tr}, ir.Attrs{}.With("shape", []int{16, 3}), ir.Pos{}))
	bn := must(g.Append(ir.OpBatchNorm, "bn", []ir.ValueID{flat, c, c}, nil, ir.Pos{File: "m.ir", Line: 5, Col: 1}))
	loss := must(g.Append(ir.OpReduceMean, "loss", []ir.ValueID{bn}, ir.Attrs{}.With("axes", []int{0, 1}), ir.Pos{}))
	g.AddOutput(loss, ir.Pos{})
	_, err := PerMicrobatchStats(g, 2)
	require.EqualError(t, err, "m.ir:5:1: cannot take the statistics of batch_norm bn per micro-batch: dim 0 of flat (16) holds the batch 8 merged with other dims")
	_, coupled := BatchCoupled(g, 2)
	assert.True(t, coupled)
}
