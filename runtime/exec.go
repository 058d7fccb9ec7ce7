package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime/kernels"
)

// device executes one program. Only its own goroutine touches it during a run.
type device struct {
	prog  *codegen.Program
	data  Data
	opts  *Options
	start time.Time // the run's start, the origin of trace times

	bufs   []*kernels.Tensor
	attrs  []ir.Attrs        // per instruction: compute attributes with defaults filled in
	args   []*kernels.Tensor // scratch for a compute's operands
	live   int64
	stats  DeviceStats
	stores []storeRec
	trace  []TraceEvent
}

// errStopped ends a device whose run was cancelled because another device failed or the
// caller cancelled; Run reports the cause, never this.
var errStopped = errors.New("runtime: stopped")

func newDevice(p *codegen.Program, data Data, opts *Options, start time.Time) *device {
	d := &device{prog: p, data: data, opts: opts, start: start,
		bufs: make([]*kernels.Tensor, len(p.Buffers)), attrs: make([]ir.Attrs, len(p.Instrs))}
	d.stats.Device = p.Device
	for i := range p.Instrs {
		in := &p.Instrs[i]
		if in.Kind != codegen.Compute {
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

// run executes the program. A kernel panic is recovered into the error of its instruction.
func (d *device) run(ctx context.Context) (err error) {
	pc := 0
	defer func() {
		if r := recover(); r != nil {
			err = d.fail(pc, fmt.Errorf("panic: %v", r), nil)
		}
	}()
	for ; pc < len(d.prog.Instrs); pc++ {
		if ctx.Err() != nil {
			return errStopped
		}
		in := &d.prog.Instrs[pc]
		t0 := time.Now()
		if err := d.exec(ctx, pc, in); err != nil {
			return err
		}
		dt := time.Since(t0)
		d.stats.Instrs++
		d.stats.Count[in.Kind]++
		d.stats.Time[in.Kind] += dt
		if d.opts.Trace {
			d.trace = append(d.trace, TraceEvent{Device: d.prog.Device, Index: pc, Kind: in.Kind, Op: in.Op,
				Start: t0.Sub(d.start), Dur: dt})
		}
		if out, ok := in.Defines(); ok {
			d.live += d.prog.Buffers[out].Type.Bytes()
			d.stats.PeakBytes = max(d.stats.PeakBytes, d.live)
		}
	}
	return nil
}

// fail wraps err as the failure of instruction pc.
func (d *device) fail(pc int, err error, peers []DeviceID) error {
	return &DeviceError{Device: d.prog.Device, Index: pc, Instr: d.prog.FormatInstr(pc),
		Pos: d.prog.Pos(pc), Peers: peers, Err: err}
}

func (d *device) exec(ctx context.Context, pc int, in *codegen.Instr) error {
	var (
		out *kernels.Tensor
		err error
	)
	switch in.Kind {
	case codegen.Compute:
		d.args = d.args[:0]
		for _, b := range in.Args {
			d.args = append(d.args, d.bufs[b])
		}
		out, err = kernels.Eval(in.Op, d.attrs[pc], d.prog.Buffers[in.Out].Type, d.args)
	case codegen.Constant:
		out = kernels.New(d.prog.Buffers[in.Out].Type)
		if in.Value != 0 {
			for i := range out.Len() {
				out.Set(i, in.Value)
			}
		}
	case codegen.Load:
		out, err = d.load(in)
	case codegen.Store:
		x := d.bufs[in.Args[0]]
		d.stores = append(d.stores, storeRec{device: d.prog.Device, pos: d.prog.Pos(pc), name: in.Name,
			full: in.Full, off: in.Offsets, block: x.Clone()})
	case codegen.Accumulate:
		acc := in.Args[0]
		d.bufs[acc], err = kernels.Eval(ir.OpAdd, nil, d.bufs[acc].Type, []*kernels.Tensor{d.bufs[acc], d.bufs[in.Args[1]]})
	case codegen.Free:
		for _, b := range in.Args {
			d.bufs[b] = nil
			d.live -= d.prog.Buffers[b].Type.Bytes()
		}
	default:
		return d.communicate(ctx, pc, in)
	}
	if err != nil {
		return d.fail(pc, err, nil)
	}
	if out != nil {
		d.bufs[in.Out] = out
	}
	return nil
}

func (d *device) load(in *codegen.Instr) (*kernels.Tensor, error) {
	feed, ok := d.data[in.Name]
	if !ok || feed == nil {
		return nil, fmt.Errorf("no feed named %q, expected the runtime's data to hold it", in.Name)
	}
	want := d.prog.Buffers[in.Out].Type
	if feed.Type.DType != want.DType {
		return nil, fmt.Errorf("feed %s is %s, expected dtype %s", in.Name, feed.Type, want.DType)
	}
	if err := feed.Check(); err != nil {
		return nil, fmt.Errorf("feed %s: %w", in.Name, err)
	}
	x, err := sliceBlock(feed, in.Offsets, want.Shape)
	if err != nil {
		return nil, fmt.Errorf("feed %s: %w", in.Name, err)
	}
	return x, nil
}

// communicate runs a collective or a transfer on the transport, under the wait timeout.
func (d *device) communicate(ctx context.Context, pc int, in *codegen.Instr) error {
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
		x = d.bufs[in.Args[0]]
	}
	switch in.Kind {
	case codegen.AllReduce:
		x, traffic, err = tr.AllReduce(wctx, self, in.Group, x)
	case codegen.AllGather:
		x, traffic, err = tr.AllGather(wctx, self, in.Group, in.Axis, x)
	case codegen.ReduceScatter:
		x, traffic, err = tr.ReduceScatter(wctx, self, in.Group, in.Axis, x)
	case codegen.AllToAll:
		x, traffic, err = tr.AllToAll(wctx, self, in.Group, in.Axis, in.ConcatAxis, x)
	case codegen.Send:
		traffic, err = tr.Send(wctx, self, in.Peer, in.Tag, x)
	case codegen.Recv:
		x, traffic, err = tr.Recv(wctx, self, in.Peer, in.Tag)
	default:
		panic(fmt.Sprintf("runtime: instruction kind %s passed validation but has no executor", in.Kind))
	}
	d.stats.BytesSent += traffic.Sent
	d.stats.BytesReceived += traffic.Received
	if err != nil {
		return d.waitFailed(ctx, pc, err)
	}
	switch in.Kind {
	case codegen.AllReduce:
		d.bufs[in.Args[0]] = x
	case codegen.Send:
	default:
		if want := d.prog.Buffers[in.Out].Type; !x.Type.Equal(want) {
			return d.fail(pc, fmt.Errorf("received %s, expected %s", x.Type, want), nil)
		}
		d.bufs[in.Out] = x
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
