package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
)

// Device 0 computes, sends to device 1 and all-reduces with it; device 1 receives,
// computes and all-reduces. The replay by hand: device 0's work (3) then its send (1)
// end at 4; device 1 starts its recv at its work (2) and at the send's end, 4, and ends it
// at 4+1 = 5, then works to 5+5 = 10; the all-reduce starts when both have reached it:
// device 0 at 4+0 = 4, device 1 at 10, so at 10; each then takes its own time (2 and 3):
// 12 and 13, then the last work (1 each): 13 and 14.
func TestCPUStepByHand(t *testing.T) {
	x := typ(ir.F32, 2, 2)
	b0, b1 := newBuilder(0), newBuilder(1)
	a := b0.load("x", x)
	y := b0.compute("y", x, ir.OpAdd, nil, a, a)
	b0.send(y, 1, "y", -1)
	b0.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{y}, Group: devices(2)})
	b0.store("out", y)
	b0.free(a, y)
	r := b1.recv("y", x, 0, "y", -1)
	z := b1.compute("z", x, ir.OpAdd, nil, r, r)
	b1.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{z}, Group: devices(2)})
	b1.store("out1", z)
	b1.free(r, z)
	progs := programs([]*builder{b0, b1})

	res, err := Run(context.Background(), progs, Data{"x": random(x, 1)}, Options{CPUTime: true})
	require.NoError(t, err)
	if CPUTimeSupported {
		assert.Len(t, res.Devices[0].CPUSpans, 5, "work, send, work, all-reduce, work")
		assert.Len(t, res.Devices[1].CPUSpans, 5, "work, recv, work, all-reduce, work")
		_, step, err := CPUStep(progs, res.Devices)
		require.NoError(t, err)
		assert.Positive(t, step)
	}

	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, v := range xs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	devs := []DeviceStats{{Device: 0, CPUSpans: ms(3, 1, 0, 2, 1)}, {Device: 1, CPUSpans: ms(2, 1, 5, 3, 1)}}
	ends, step, err := CPUStep(progs, devs)
	require.NoError(t, err)
	assert.Equal(t, ms(13, 14), ends)
	assert.Equal(t, 14*time.Millisecond, step)

	_, _, err = CPUStep(progs, []DeviceStats{devs[0], {Device: 1}})
	assert.ErrorContains(t, err, "device 1 has 0 CPU spans for a program that communicates 2 times")
	_, _, err = CPUStep(progs[:1], devs[:1])
	assert.ErrorContains(t, err, "the programs wait on each other")
}

// A traced run under CPUTime gives each instruction its CPU time (TraceEvent.CPU): a
// matmul of 64×64 takes some, and the instructions of a device together take no more
// than its spans; untraced or without CPUTime, none.
func TestTraceCPUPerInstruction(t *testing.T) {
	if !CPUTimeSupported {
		t.Skip("no per-thread CPU clock here")
	}
	x := typ(ir.F32, 64, 64)
	b := newBuilder(0)
	a := b.load("x", x)
	y := b.compute("y", x, ir.OpMatMul, nil, a, a)
	b.store("out", y)
	b.free(a, y)
	progs := programs([]*builder{b})
	res, err := Run(context.Background(), progs, Data{"x": random(x, 1)}, Options{CPUTime: true, Trace: true})
	require.NoError(t, err)
	var sum, spans time.Duration
	for _, e := range res.Trace {
		sum += e.CPU
		if e.Kind == program.Compute {
			assert.Positive(t, e.CPU, "the matmul")
		}
	}
	for _, s := range res.Devices[0].CPUSpans {
		spans += s
	}
	assert.LessOrEqual(t, sum, spans)
	res, err = Run(context.Background(), progs, Data{"x": random(x, 1)}, Options{Trace: true})
	require.NoError(t, err)
	for _, e := range res.Trace {
		assert.Zero(t, e.CPU)
	}
}
