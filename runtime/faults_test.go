package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// runErr runs and returns the error with how long the run took.
func runErr(t *testing.T, ctx context.Context, bs []*builder, data Data, opts Options) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := Run(ctx, programs(bs), data, opts)
	require.Error(t, err)
	assert.Nil(t, res)
	return err, time.Since(start)
}

func TestRecvWithoutSendTimesOut(t *testing.T) {
	b0, b1 := newBuilder(0), newBuilder(1)
	b0.recv("h", typ(ir.F32, 2), 1, "h", 3)
	b1.def("c", typ(ir.F32, 2), program.Instr{Kind: program.Constant, Value: 1})
	err, took := runErr(t, context.Background(), []*builder{b0, b1}, nil, Options{Timeout: 50 * time.Millisecond})
	var de *DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, DeviceID(0), de.Device)
	assert.Equal(t, 0, de.Index)
	assert.Equal(t, []DeviceID{1}, de.Peers)
	assert.Equal(t, "device0.prog:3:1: device 0: instr 0 (%0 = recv from=1 tag=h@mb3 : f32[2]): timed out after 50ms waiting for device 1", err.Error())
	assert.Less(t, took, 2*time.Second)
}

func TestCollectiveTimeoutNamesMissingPeer(t *testing.T) {
	bs := make([]*builder, 4)
	for d := range 4 {
		bs[d] = newBuilder(DeviceID(d))
		x := bs[d].def("x", typ(ir.F64, 4), program.Instr{Kind: program.Constant, Value: 1})
		if d != 3 { // device 3 never joins
			bs[d].emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{x}, Group: devices(4)})
		}
	}
	err, took := runErr(t, context.Background(), bs, nil, Options{Timeout: 50 * time.Millisecond})
	var de *DeviceError
	require.ErrorAs(t, err, &de)
	assert.Less(t, de.Device, DeviceID(3))
	assert.Equal(t, 1, de.Index)
	assert.Equal(t, []DeviceID{3}, de.Peers)
	assert.Contains(t, err.Error(), "all_reduce %0 group=[0,1,2,3]): timed out after 50ms waiting for device 3")
	assert.Less(t, took, 2*time.Second)
}

// failingRun has device `bad` fail after its first instruction while the others wait for it
// in an all-reduce with the default one-minute timeout: the failure must stop them at once.
func failingRun(t *testing.T, bad DeviceID, opts Options, fail func(b *builder)) (*DeviceError, time.Duration) {
	t.Helper()
	bs := make([]*builder, 4)
	for d := range 4 {
		b := newBuilder(DeviceID(d))
		x := b.def("x", typ(ir.F64, 4), program.Instr{Kind: program.Constant, Value: 1})
		if DeviceID(d) == bad {
			fail(b)
		}
		b.emit(program.Instr{Kind: program.AllReduce, Args: []program.BufferID{x}, Group: devices(4)})
		bs[d] = b
	}
	err, took := runErr(t, context.Background(), bs, nil, opts)
	var de *DeviceError
	require.ErrorAs(t, err, &de)
	return de, took
}

func TestKernelErrorStopsEveryDevice(t *testing.T) {
	de, took := failingRun(t, 2, Options{}, func(b *builder) {
		one := b.def("one", typ(ir.I64, 2), program.Instr{Kind: program.Constant, Value: 1})
		zero := b.def("zero", typ(ir.I64, 2), program.Instr{Kind: program.Constant, Value: 0})
		b.compute("q", typ(ir.I64, 2), ir.OpDiv, nil, one, zero)
	})
	assert.Equal(t, DeviceID(2), de.Device)
	assert.Equal(t, 3, de.Index)
	assert.Contains(t, de.Error(), "device 2: instr 3 (%3 = compute div %1, %2 : i64[2])")
	assert.Less(t, took, 5*time.Second)
}

// panickingTransport panics in the send of one device, standing in for any panic inside an
// instruction (the kernels promise errors, not panics, but a bug may break that promise).
type panickingTransport struct{ *InProc }

func (p panickingTransport) Send(context.Context, DeviceID, DeviceID, program.Tag, *kernels.Tensor) (Traffic, error) {
	panic("boom")
}

func TestPanicIsRecoveredAndStopsEveryDevice(t *testing.T) {
	tr := panickingTransport{NewInProc(devices(4))}
	de, took := failingRun(t, 1, Options{Transport: tr}, func(b *builder) { b.send(0, 2, "x", 0) })
	assert.Equal(t, DeviceID(1), de.Device)
	assert.Equal(t, 1, de.Index)
	assert.Equal(t, "device1.prog:4:1: device 1: instr 1 (send %0 to=2 tag=x@mb0): panic: boom", de.Error())
	assert.Less(t, took, 5*time.Second)
}

func TestCancellation(t *testing.T) {
	b0, b1 := newBuilder(0), newBuilder(1)
	b0.recv("h", typ(ir.F32, 2), 1, "h", 0)
	b1.recv("h", typ(ir.F32, 2), 0, "h", 0)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	err, took := runErr(t, ctx, []*builder{b0, b1}, nil, Options{})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, took, 5*time.Second)

	deadline, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	err, _ = runErr(t, deadline, []*builder{b0, b1}, nil, Options{})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestRunErrors(t *testing.T) {
	f2 := typ(ir.F64, 2)
	tests := []struct {
		name  string
		build func() []*builder
		data  Data
		want  string
	}{
		{"no programs", func() []*builder { return nil }, nil, "runtime: no programs to run"},
		{"two programs for a device", func() []*builder { return []*builder{newBuilder(0), newBuilder(0)} }, nil,
			"two programs for device 0"},
		{"invalid program", func() []*builder {
			b := newBuilder(0)
			b.free(0)
			return []*builder{b}
		}, nil, "device0.prog:2:1: free: buffer %0 is not declared, expected one of the 0 declared buffers"},
		{"peer without program", func() []*builder {
			b := newBuilder(0)
			b.send(b.load("x", f2), 5, "x", 0)
			return []*builder{b}
		}, Data{"x": random(f2, 1)}, "device0.prog:4:1: send names device 5, which has no program"},
		{"missing feed", func() []*builder {
			b := newBuilder(0)
			b.load("nope", f2)
			return []*builder{b}
		}, nil, `instr 0 (%0 = load nope[0:2] : f64[2]): no feed named "nope"`},
		{"feed dtype", func() []*builder {
			b := newBuilder(0)
			b.load("x", typ(ir.F32, 2))
			return []*builder{b}
		}, Data{"x": random(f2, 1)}, "feed x is f64[2], expected dtype f32"},
		{"block outside feed", func() []*builder {
			b := newBuilder(0)
			b.load("x", f2, 1)
			return []*builder{b}
		}, Data{"x": random(f2, 1)}, "feed x: block [2] at offsets [1] does not fit f64[2]"},
		{"malformed feed", func() []*builder {
			b := newBuilder(0)
			b.load("x", f2)
			return []*builder{b}
		}, Data{"x": {Type: f2, F64: make([]float64, 1)}}, "feed x: tensor of type f64[2] does not hold 2 elements"},
		{"feed in the wrong storage", func() []*builder {
			b := newBuilder(0)
			b.load("x", typ(ir.F32, 2))
			return []*builder{b}
		}, Data{"x": {Type: typ(ir.F32, 2), F64: make([]float64, 2)}}, "feed x: tensor of type f32[2] does not hold 2 elements"},
		{"send never received", func() []*builder {
			b0 := newBuilder(0)
			b0.send(b0.load("x", f2), 1, "x", 2)
			return []*builder{b0, newBuilder(1)}
		}, Data{"x": random(f2, 1)}, "device 0 sent 1 message(s) to device 1 under tag x@mb2 that were never received"},
		{"recv type", func() []*builder {
			b0, b1 := newBuilder(0), newBuilder(1)
			b0.send(b0.load("x", f2), 1, "x", 0)
			b1.recv("x", typ(ir.F64, 3), 0, "x", 0)
			return []*builder{b0, b1}
		}, Data{"x": random(f2, 1)}, "received f64[2], expected f64[3]"},
		{"replicas disagree", func() []*builder {
			bs := []*builder{newBuilder(0), newBuilder(1)}
			for d, b := range bs {
				b.store("out", b.def("c", f2, program.Instr{Kind: program.Constant, Value: float64(d)}))
			}
			return bs
		}, nil, "device 1 stores 1 into out at element 0, but device 0 stored 0 there, expected replicas to agree"},
		{"store leaves a gap", func() []*builder {
			b := newBuilder(0)
			b.emit(program.Instr{Kind: program.Store, Args: []program.BufferID{b.load("x", f2)}, Name: "out",
				Offsets: []int{1}, Full: typ(ir.F64, 4)})
			return []*builder{b}
		}, Data{"x": random(f2, 1)}, "stores to out leave 2 of 4 elements unwritten"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err, _ := runErr(t, context.Background(), tt.build(), tt.data, Options{Timeout: time.Second})
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// Stores of disjoint blocks assemble a whole result; equal replicas may overlap.
func TestStoresAssemble(t *testing.T) {
	full := typ(ir.F64, 4, 2)
	x := random(full, 3)
	bs := make([]*builder, 4)
	for d := range 4 {
		b := newBuilder(DeviceID(d))
		rows := 2 * (d / 2) // devices 0,1 hold rows 0-1, devices 2,3 rows 2-3: replicas in pairs
		blk := b.load("x", typ(ir.F64, 2, 2), rows, 0)
		b.emit(program.Instr{Kind: program.Store, Args: []program.BufferID{blk}, Name: "y", Offsets: []int{rows, 0}, Full: full})
		bs[d] = b
	}
	res, err := Run(context.Background(), programs(bs), Data{"x": x}, Options{})
	require.NoError(t, err)
	assert.Equal(t, x.F64, res.Stores["y"].F64)
}

// A user Transport replaces the in-process one without any change to the programs.
type countingTransport struct {
	*InProc
	calls int
}

func (c *countingTransport) Send(ctx context.Context, self, peer DeviceID, tag program.Tag, x *kernels.Tensor) (Traffic, error) {
	c.calls++
	return c.InProc.Send(ctx, self, peer, tag, x)
}

func TestCustomTransport(t *testing.T) {
	tr := &countingTransport{InProc: NewInProc(devices(2))}
	data := Data{"x": random(typ(ir.F64, 4, 4), 1), "w0": random(typ(ir.F64, 4, 4), 2), "w1": random(typ(ir.F64, 4, 4), 3)}
	res, err := Run(context.Background(), pipeline(2, 2, 2, 4), data, Options{Transport: tr})
	require.NoError(t, err)
	assert.Equal(t, 2, tr.calls)
	assert.NotNil(t, res.Stores["out"])
	assert.Empty(t, tr.Pending())
}

func TestWaitErrorMessage(t *testing.T) {
	e := &WaitError{Peers: []DeviceID{1, 2}, Err: context.DeadlineExceeded}
	assert.Equal(t, "context deadline exceeded waiting for devices 1, 2", e.Error())
	assert.True(t, errors.Is(e, context.DeadlineExceeded))
}

// deafTransport ignores its context: every Recv blocks until release is closed, as a
// transport stuck in a network call would.
type deafTransport struct {
	*InProc
	release chan struct{}
}

func (d deafTransport) Recv(context.Context, DeviceID, DeviceID, program.Tag) (*kernels.Tensor, Traffic, error) {
	<-d.release
	return nil, Traffic{}, errors.New("released")
}

func TestTransportIgnoringContextDoesNotBlockRun(t *testing.T) {
	tr := deafTransport{NewInProc(devices(2)), make(chan struct{})}
	t.Cleanup(func() { close(tr.release) }) // let the abandoned calls end before goleak looks
	b0, b1 := newBuilder(0), newBuilder(1)
	b0.recv("h", typ(ir.F32, 2), 1, "h", 0)
	b1.def("c", typ(ir.F32, 2), program.Instr{Kind: program.Constant, Value: 1})
	err, took := runErr(t, context.Background(), []*builder{b0, b1}, nil, Options{Transport: tr, Timeout: 50 * time.Millisecond})
	var de *DeviceError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, []DeviceID{1}, de.Peers)
	assert.Contains(t, err.Error(), "timed out after 50ms waiting for device 1")
	assert.Less(t, took, 2*time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	err, took = runErr(t, ctx, []*builder{b0, b1}, nil, Options{Transport: tr, Timeout: time.Hour})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, took, 2*time.Second)
}
