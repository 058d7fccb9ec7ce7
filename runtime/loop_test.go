package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// sumProgram sums the micro-batches of feed x (blocks of 2 along dim 0) in a loop: a
// prologue zeroes the accumulator, a per-micro-batch block loads its slice and adds it, the
// update stores the sum.
func sumProgram(b int) *program.Program {
	f := typ(ir.F64, 2)
	p := &program.Program{Device: 0, Microbatches: b,
		Buffers: []program.BufferDecl{{Name: "acc", Type: f}, {Name: "x", Type: f, PerMicrobatch: true}, {Name: "sq", Type: f, PerMicrobatch: true}},
		Instrs: []program.Instr{
			{Kind: program.Constant, Out: 0},
			{Kind: program.Load, Out: 1, Name: "x", Offsets: []int{0}, Stride: []int{2}},
			{Kind: program.Compute, Out: 2, Op: ir.OpMul, Args: []program.BufferID{1, 1}},
			{Kind: program.Accumulate, Out: program.NoBuffer, Args: []program.BufferID{0, 1}},
			{Kind: program.Free, Out: program.NoBuffer, Args: []program.BufferID{2}},
			{Kind: program.Accumulate, Out: program.NoBuffer, Args: []program.BufferID{0, 1}},
			{Kind: program.Free, Out: program.NoBuffer, Args: []program.BufferID{1}},
			{Kind: program.Store, Out: program.NoBuffer, Args: []program.BufferID{0}, Name: "sum", Offsets: []int{0}, Full: f},
			{Kind: program.Free, Out: program.NoBuffer, Args: []program.BufferID{0}},
		},
		Blocks: []program.Block{{Name: "prologue", Start: 0, End: 1}, {Name: "forward", Start: 1, End: 4, PerMicrobatch: true},
			{Name: "backward", Start: 4, End: 7, PerMicrobatch: true}, {Name: "update", Start: 7, End: 9}},
		Schedule: []program.Loop{{From: 0, To: 1, Body: []program.Call{{Block: 0}}},
			{From: 0, To: 1, Body: []program.Call{{Block: 1}}},
			{From: 0, To: b - 1, Body: []program.Call{{Block: 1, Shift: 1}, {Block: 2}}},
			{From: b - 1, To: b, Body: []program.Call{{Block: 2}}},
			{From: 0, To: 1, Body: []program.Call{{Block: 3}}}},
	}
	return p
}

// The executor runs the loops with each micro-batch's own buffers (two in flight here),
// loads each micro-batch's slice by its stride, and counts what Predict says.
func TestRunLoopProgram(t *testing.T) {
	const b = 5
	p := sumProgram(b)
	require.NoError(t, p.Validate())
	x := make([]float64, 2*b)
	want := []float64{0, 0}
	for i := range x {
		x[i] = float64(i + 1)
		want[i%2] += 2 * x[i]
	}
	res, err := Run(context.Background(), []*program.Program{p}, Data{"x": kernels.FromF64(ir.F64, ir.Shape{2 * b}, x)}, Options{Trace: true})
	require.NoError(t, err)
	assert.Equal(t, want, res.Stores["sum"].Float64s())
	pred := codegen.Predict(nil, []*program.Program{p})[0]
	st := res.Devices[0]
	assert.Equal(t, pred.PeakBytes, st.PeakBytes)
	assert.Equal(t, int64(5*16), st.PeakBytes, "acc and two micro-batches' x and sq, never more")
	assert.Equal(t, 1+3*b+3*b+2, st.Instrs)
	mbs := map[int]int{}
	for _, e := range res.Trace {
		mbs[e.Microbatch]++
	}
	assert.Equal(t, map[int]int{-1: 3, 0: 6, 1: 6, 2: 6, 3: 6, 4: 6}, mbs)
}

// A failure inside a micro-batch block names the micro-batch.
func TestRunLoopProgramNamesTheMicrobatch(t *testing.T) {
	p := sumProgram(3)
	_, err := Run(context.Background(), []*program.Program{p}, Data{"x": kernels.FromF64(ir.F64, ir.Shape{4}, []float64{1, 2, 3, 4})}, Options{})
	var de *DeviceError
	require.True(t, errors.As(err, &de), "%v", err)
	assert.Equal(t, 2, de.Microbatch)
	assert.Contains(t, err.Error(), "instr 1 (%1 = load x[0:2] stride=[2] : f64[2]) of micro-batch 2")
}
