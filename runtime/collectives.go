package runtime

import (
	"context"
	"fmt"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// Exchange is the one primitive every collective is built from, for every transport: the
// calling member gives out[j] to rank j of its group and returns in, where in[j] is the
// block rank j gave it and in[r] is out[r] itself (r the caller's rank). phase tells apart
// the exchanges of one collective (all-reduce has two). A transport may deliver out[j]
// uncopied: the blocks passed are private to the call, and receivers only read them.
//
// InProc implements it with mailboxes, runtime/mpi with MPI point-to-point messages on one
// communicator per group. Because the collectives below are the only place the blocks are
// cut, summed and joined, every transport built on them gives bit-identical results.
type Exchange func(ctx context.Context, phase uint8, out []*kernels.Tensor) ([]*kernels.Tensor, Traffic, error)

// ExchangeAllGather is all_gather over ex: x goes to everyone, the blocks are concatenated
// along axis in rank order.
func ExchangeAllGather(ctx context.Context, ex Exchange, self DeviceID, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	if axis < 0 || axis >= x.Type.Shape.Rank() {
		return nil, Traffic{}, fmt.Errorf("all_gather axis %d out of range for %s", axis, x.Type)
	}
	out := make([]*kernels.Tensor, len(group))
	private := x.Clone() // one copy, read by every receiver
	for j := range out {
		out[j] = private
	}
	in, tr, err := ex(ctx, 0, out)
	if err != nil {
		return nil, tr, err
	}
	for j, p := range in {
		if !p.Type.Equal(x.Type) {
			return nil, tr, fmt.Errorf("all_gather: device %d gave %s, device %d gave %s, expected equal types", group[j], p.Type, self, x.Type)
		}
	}
	return concat(in, axis), tr, nil
}

// ExchangeReduceScatter is reduce_scatter over ex: block j of x along axis goes to rank j,
// which sums what arrives in rank order.
func ExchangeReduceScatter(ctx context.Context, ex Exchange, group []DeviceID, axis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	if err := splittable("reduce_scatter", x, axis, len(group)); err != nil {
		return nil, Traffic{}, err
	}
	in, tr, err := ex(ctx, 0, split(x, axis, len(group)))
	if err != nil {
		return nil, tr, err
	}
	sum, err := sumInOrder(in, group)
	return sum, tr, err
}

// ExchangeAllToAll is all_to_all over ex: block j of x along splitAxis goes to rank j, and
// the blocks that arrive are concatenated along concatAxis in rank order.
func ExchangeAllToAll(ctx context.Context, ex Exchange, group []DeviceID, splitAxis, concatAxis int, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	if err := splittable("all_to_all", x, splitAxis, len(group)); err != nil {
		return nil, Traffic{}, err
	}
	if concatAxis < 0 || concatAxis >= x.Type.Shape.Rank() {
		return nil, Traffic{}, fmt.Errorf("all_to_all concat axis %d out of range for %s", concatAxis, x.Type)
	}
	in, tr, err := ex(ctx, 0, split(x, splitAxis, len(group)))
	if err != nil {
		return nil, tr, err
	}
	for j, p := range in {
		if !p.Type.Equal(in[0].Type) {
			return nil, tr, fmt.Errorf("all_to_all: device %d gave blocks of %s, device %d of %s, expected equal types", group[j], p.Type, group[0], in[0].Type)
		}
	}
	return concat(in, concatAxis), tr, nil
}

// ExchangeAllReduce is all_reduce over ex: a reduce-scatter of the flattened elements
// (chunk r = [r·L/n, (r+1)·L/n), summed in rank order by rank r) in phase 0, then an
// all-gather of the summed chunks in phase 1.
func ExchangeAllReduce(ctx context.Context, ex Exchange, group []DeviceID, x *kernels.Tensor) (*kernels.Tensor, Traffic, error) {
	n := len(group)
	in, tr, err := ex(ctx, 0, chunks(x.Clone(), n))
	if err != nil {
		return nil, tr, err
	}
	sum, err := sumInOrder(in, group)
	if err != nil {
		return nil, tr, err
	}
	out := make([]*kernels.Tensor, n)
	for j := range out {
		out[j] = sum
	}
	all, tr2, err := ex(ctx, 1, out)
	tr.Sent, tr.Received = tr.Sent+tr2.Sent, tr.Received+tr2.Received
	if err != nil {
		return nil, tr, err
	}
	res := concat(all, 0)
	res.Type = ir.Type{DType: x.Type.DType, Shape: x.Type.Shape.Clone()}
	return res, tr, nil
}

// splittable checks that x can be cut into n blocks along axis.
func splittable(what string, x *kernels.Tensor, axis, n int) error {
	if axis < 0 || axis >= x.Type.Shape.Rank() || x.Type.Shape[axis]%n != 0 {
		return fmt.Errorf("%s cannot split %s into %d blocks along axis %d", what, x.Type, n, axis)
	}
	return nil
}

// sumInOrder adds blocks in rank order with the kernels' add, so rounding is the serial
// interpreter's: ((b₀ + b₁) + b₂) + …. It never modifies its operands; the partial sums
// alternate between two buffers.
func sumInOrder(blocks []*kernels.Tensor, group []DeviceID) (*kernels.Tensor, error) {
	for j := 1; j < len(blocks); j++ {
		if !blocks[j].Type.Equal(blocks[0].Type) {
			return nil, fmt.Errorf("device %d gave %s, device %d gave %s, expected equal types to sum",
				group[j], blocks[j].Type, group[0], blocks[0].Type)
		}
	}
	if len(blocks) == 1 {
		return blocks[0].Clone(), nil
	}
	sum, err := kernels.Eval(ir.OpAdd, nil, blocks[0].Type, blocks[:2])
	if err != nil || len(blocks) == 2 {
		return sum, err
	}
	spare := kernels.New(sum.Type)
	for j := 2; j < len(blocks); j++ {
		if err := kernels.EvalInto(ir.OpAdd, nil, spare, []*kernels.Tensor{sum, blocks[j]}); err != nil {
			return nil, err
		}
		sum, spare = spare, sum
	}
	return sum, nil
}
