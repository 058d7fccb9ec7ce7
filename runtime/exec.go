package runtime

import (
	"context"
	"errors"
	"fmt"
	goruntime "runtime"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// device executes one program. Only its own goroutine touches it during a run.
type device struct {
	prog  *program.Program
	data  Data
	opts  *Options
	start time.Time // the run's start, the origin of trace times

	bufs []*kernels.Tensor // the buffers of the step (nil for a micro-batch's)
	// slot is, per buffer of a micro-batch, its index in a micro-batch's buffers; mbBufs
	// holds those of each micro-batch in flight, dropped when the last is freed.
	slot   []int
	nSlots int
	mbBufs map[int]*mbState
	mb     int               // the micro-batch the running block is for (−1: of the step)
	attrs  []ir.Attrs        // per instruction: compute attributes with defaults filled in
	args   []*kernels.Tensor // scratch for a compute's operands
	live   int64
	stats  DeviceStats
	stores []storeRec
	trace  []TraceEvent
	// resident holds, for a Session, this device's blocks of the params and state kept on
	// it between steps, by name: its loads of those names slice them instead of a feed.
	resident map[string][]storeRec
}

// mbState holds one micro-batch's buffers and how many are live.
type mbState struct {
	bufs []*kernels.Tensor
	live int
}

// errStopped ends a device whose run was cancelled because another device failed or the
// caller cancelled; Run reports the cause, never this.
var errStopped = errors.New("runtime: stopped")

func newDevice(p *program.Program, data Data, opts *Options, start time.Time) *device {
	d := &device{prog: p, data: data, opts: opts, start: start, mb: -1,
		bufs: make([]*kernels.Tensor, len(p.Buffers)), attrs: make([]ir.Attrs, len(p.Instrs)),
		slot: make([]int, len(p.Buffers)), mbBufs: map[int]*mbState{}}
	d.stats.Device = p.Device
	for b, decl := range p.Buffers {
		d.slot[b] = -1
		if decl.PerMicrobatch {
			d.slot[b] = d.nSlots
			d.nSlots++
		}
	}
	for i := range p.Instrs {
		in := &p.Instrs[i]
		if in.Kind != program.Compute {
			continue
		}
		args := make([]ir.Arg, len(in.Args))
		for k, b := range in.Args {
			args[k] = ir.Arg{Type: p.Buffers[b].Type}
		}
		_, at, err := ir.InferType(in.Op, args, in.Attrs)
		if err != nil {
			panic(fmt.Sprintf("runtime: validated compute failed its shape rule: %v", err))
		}
		d.attrs[i] = at
	}
	return d
}

// run executes the program, block by block in its schedule's order, each micro-batch block
// with the buffers of its micro-batch. A kernel panic is recovered into the error of its
// instruction.
func (d *device) run(ctx context.Context) (err error) {
	pc := 0
	defer func() {
		if r := recover(); r != nil {
			err = d.fail(pc, fmt.Errorf("panic: %v", r), nil)
		}
	}()
	cpu := d.opts.CPUTime
	var (
		c0      time.Duration                   // the thread's CPU clock at the start of the span
		spanDur [program.NumKinds]time.Duration // wall time per kind in the span
	)
	if cpu {
		goruntime.LockOSThread()
		defer goruntime.UnlockOSThread()
		c0 = ThreadCPU()
		defer func() {
			if err == nil {
				d.endSpan(&c0, &spanDur)
			}
		}()
	}
	for p, mb := range d.prog.Execution {
		pc, d.mb = p, mb
		if ctx.Err() != nil {
			return errStopped
		}
		in := &d.prog.Instrs[pc]
		comm := cpu && (in.Kind.IsCollective() || in.Kind == program.Send || in.Kind == program.Recv)
		if comm {
			d.endSpan(&c0, &spanDur)
		}
		var ci time.Duration
		if cpu && d.opts.Trace {
			ci = ThreadCPU()
		}
		t0 := time.Now()
		if err := d.exec(ctx, pc, in); err != nil {
			return err
		}
		dt := time.Since(t0)
		if cpu && d.opts.Trace {
			ci = ThreadCPU() - ci
		}
		d.stats.Instrs++
		d.stats.Count[in.Kind]++
		d.stats.Time[in.Kind] += dt
		switch {
		case comm:
			c1 := ThreadCPU()
			d.stats.CPU[in.Kind] += c1 - c0
			d.stats.CPUSpans = append(d.stats.CPUSpans, c1-c0)
			c0 = c1
		case cpu:
			spanDur[in.Kind] += dt
		}
		if d.opts.Trace {
			d.trace = append(d.trace, TraceEvent{Device: d.prog.Device, Index: pc, Microbatch: mb, Kind: in.Kind, Op: in.Op,
				Name: EventName(d.prog, pc, mb), Start: t0.Sub(d.start), Dur: dt, CPU: ci})
		}
		if out, ok := in.Defines(); ok {
			d.live += d.prog.Buffers[out].Type.Bytes()
			d.stats.PeakBytes = max(d.stats.PeakBytes, d.live)
		}
	}
	return nil
}

// endSpan ends a span of instructions that do not communicate, under Options.CPUTime:
// its CPU time (since *c0) goes to DeviceStats.CPUSpans, and to DeviceStats.CPU split
// over the kinds in proportion to their wall time in the span (reading the thread's
// clock costs a system call, so it is read around communication only).
func (d *device) endSpan(c0 *time.Duration, wall *[program.NumKinds]time.Duration) {
	c1 := ThreadCPU()
	span := c1 - *c0
	d.stats.CPUSpans = append(d.stats.CPUSpans, span)
	var total time.Duration
	for _, w := range wall {
		total += w
	}
	if total > 0 {
		for k, w := range wall {
			d.stats.CPU[k] += time.Duration(float64(span) * float64(w) / float64(total))
		}
	}
	*wall = [program.NumKinds]time.Duration{}
	*c0 = c1
}

// buf returns buffer b of the running block: the step's, or its micro-batch's.
func (d *device) buf(b program.BufferID) *kernels.Tensor {
	if s := d.slot[b]; s >= 0 {
		if st := d.mbBufs[d.mb]; st != nil {
			return st.bufs[s]
		}
		return nil
	}
	return d.bufs[b]
}

// setBuf sets buffer b of the running block (x nil: frees it).
func (d *device) setBuf(b program.BufferID, x *kernels.Tensor) {
	s := d.slot[b]
	if s < 0 {
		d.bufs[b] = x
		return
	}
	st := d.mbBufs[d.mb]
	if st == nil {
		st = &mbState{bufs: make([]*kernels.Tensor, d.nSlots)}
		d.mbBufs[d.mb] = st
	}
	switch {
	case st.bufs[s] == nil && x != nil:
		st.live++
	case st.bufs[s] != nil && x == nil:
		st.live--
	}
	st.bufs[s] = x
	if st.live == 0 {
		delete(d.mbBufs, d.mb)
	}
}

// fail wraps err as the failure of instruction pc.
func (d *device) fail(pc int, err error, peers []DeviceID) error {
	return &DeviceError{Device: d.prog.Device, Index: pc, Microbatch: d.mb, Instr: d.prog.FormatInstr(pc),
		Pos: d.prog.Pos(pc), Peers: peers, Err: err}
}

func (d *device) exec(ctx context.Context, pc int, in *program.Instr) error {
	var (
		out *kernels.Tensor
		err error
	)
	switch in.Kind {
	case program.Compute:
		d.args = d.args[:0]
		for _, b := range in.Args {
			d.args = append(d.args, d.buf(b))
		}
		out, err = kernels.Eval(in.Op, d.attrs[pc], d.prog.Buffers[in.Out].Type, d.args)
	case program.Constant:
		out = kernels.New(d.prog.Buffers[in.Out].Type)
		if in.Value != 0 && out.Len() > 0 {
			// Set the first element as the dtype rounds it, then copy it to the rest.
			out.Set(0, in.Value)
			fillFirst(out.F32)
			fillFirst(out.F64)
			fillFirst(out.Int)
		}
	case program.Load:
		out, err = d.load(in)
	case program.Store:
		x := d.buf(in.Args[0])
		d.stores = append(d.stores, storeRec{device: d.prog.Device, pos: d.prog.Pos(pc), name: in.Name,
			full: in.Full, off: in.Offsets, block: x.Clone()})
	case program.Accumulate:
		acc := d.buf(in.Args[0])
		var sum *kernels.Tensor
		if sum, err = kernels.Eval(ir.OpAdd, nil, acc.Type, []*kernels.Tensor{acc, d.buf(in.Args[1])}); err == nil {
			d.setBuf(in.Args[0], sum)
		}
	case program.Free:
		for _, b := range in.Args {
			d.setBuf(b, nil)
			d.live -= d.prog.Buffers[b].Type.Bytes()
		}
	default:
		return d.communicate(ctx, pc, in)
	}
	if err != nil {
		return d.fail(pc, err, nil)
	}
	if out != nil {
		d.setBuf(in.Out, out)
	}
	return nil
}

func (d *device) load(in *program.Instr) (*kernels.Tensor, error) {
	want := d.prog.Buffers[in.Out].Type
	if blocks, ok := d.resident[in.Name]; ok {
		off := program.LoadOffsets(in, d.mb)
		for _, b := range blocks {
			if inside(off, want.Shape, b.off, b.block.Type.Shape) {
				rel := make([]int, len(off))
				for k := range off {
					rel[k] = off[k] - b.off[k]
				}
				return sliceBlock(b.block, rel, want.Shape)
			}
		}
		return nil, fmt.Errorf("no resident block of %s on this device holds %v at offsets %v", in.Name, want.Shape, off)
	}
	feed, ok := d.data[in.Name]
	if !ok || feed == nil {
		return nil, fmt.Errorf("no feed named %q, expected the runtime's data to hold it", in.Name)
	}
	if feed.Type.DType != want.DType {
		return nil, fmt.Errorf("feed %s is %s, expected dtype %s", in.Name, feed.Type, want.DType)
	}
	if err := feed.Check(); err != nil {
		return nil, fmt.Errorf("feed %s: %w", in.Name, err)
	}
	x, err := sliceBlock(feed, program.LoadOffsets(in, d.mb), want.Shape)
	if err != nil {
		return nil, fmt.Errorf("feed %s: %w", in.Name, err)
	}
	d.stats.FeedBytes += tensorBytes(x)
	return x, nil
}

// communicate runs a collective or a transfer on the transport, under the wait timeout.
func (d *device) communicate(ctx context.Context, pc int, in *program.Instr) error {
	wctx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	tr := d.opts.Transport
	self := d.prog.Device
	var (
		x       *kernels.Tensor
		traffic Traffic
		err     error
	)
	if len(in.Args) > 0 {
		x = d.buf(in.Args[0])
	}
	switch in.Kind {
	case program.AllReduce:
		x, traffic, err = tr.AllReduce(wctx, self, in.Group, x)
	case program.AllGather:
		x, traffic, err = tr.AllGather(wctx, self, in.Group, in.Axis, x)
	case program.ReduceScatter:
		x, traffic, err = tr.ReduceScatter(wctx, self, in.Group, in.Axis, x)
	case program.AllToAll:
		x, traffic, err = tr.AllToAll(wctx, self, in.Group, in.Axis, in.ConcatAxis, x)
	case program.Send:
		traffic, err = tr.Send(wctx, self, in.Peer, program.TransferTag(in, d.mb), x)
	case program.Recv:
		x, traffic, err = tr.Recv(wctx, self, in.Peer, program.TransferTag(in, d.mb))
	default:
		panic(fmt.Sprintf("runtime: instruction kind %s passed validation but has no executor", in.Kind))
	}
	d.stats.BytesSent += traffic.Sent
	d.stats.BytesReceived += traffic.Received
	if err != nil {
		return d.waitFailed(ctx, pc, err)
	}
	switch in.Kind {
	case program.AllReduce:
		d.setBuf(in.Args[0], x)
	case program.Send:
	default:
		if want := d.prog.Buffers[in.Out].Type; !x.Type.Equal(want) {
			return d.fail(pc, fmt.Errorf("received %s, expected %s", x.Type, want), nil)
		}
		d.setBuf(in.Out, x)
	}
	return nil
}

// waitFailed turns a transport error into the device's error: errStopped when the run was
// cancelled (another device failed, or the caller cancelled), a timeout naming the peers, or
// the transport's own error.
func (d *device) waitFailed(ctx context.Context, pc int, err error) error {
	if ctx.Err() != nil {
		return errStopped
	}
	var we *WaitError
	if errors.As(err, &we) {
		if errors.Is(we.Err, context.DeadlineExceeded) {
			return d.fail(pc, fmt.Errorf("timed out after %v waiting for %s", d.opts.Timeout, devicesString(we.Peers)), we.Peers)
		}
	}
	return d.fail(pc, err, nil)
}

// fillFirst sets every element of xs to its first (none for an empty slice).
func fillFirst[T any](xs []T) {
	if len(xs) > 0 {
		for i := 1; i < len(xs); i *= 2 {
			copy(xs[i:], xs[:i])
		}
	}
}
