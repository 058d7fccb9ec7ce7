package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// Data holds the feeds of a run by name: params, inputs and state, each whole. A load
// instruction slices the block its device needs.
type Data map[string]*kernels.Tensor

// DefaultTimeout is how long one instruction may wait for its peers when Options.Timeout is
// zero.
const DefaultTimeout = time.Minute

// Options configures Run.
type Options struct {
	// Transport carries collectives and transfers; nil means a fresh InProc over the
	// programs' devices. With an InProc, Run also checks after the run that every send was
	// received. Any other transport is not trusted to honour cancellation: each of its calls
	// runs on a goroutine of its own, and a call still blocked when its wait times out or the
	// run is cancelled is abandoned there, so Run returns all the same. A transport serves one run: its collective counters assume every device
	// finished the same collectives.
	Transport Transport
	// Timeout bounds each wait of one instruction (a collective, a recv, a send); 0 means
	// DefaultTimeout. A device that waits longer fails, naming the instruction and the peers.
	Timeout time.Duration
	// Trace records the start and end of every instruction in Result.Trace.
	Trace bool
	// CPUTime measures the instructions also in the CPU time of their device's thread
	// (DeviceStats.CPU and CPUSpans; CPUStep replays them): each device's goroutine is
	// locked to an OS thread for the run and its contractions run on that thread
	// (kernels.OneCore), so what an instruction computed is on its device's clock whatever
	// else the machine runs. Time a device spends waiting uses no CPU; work a transport
	// does on other goroutines (any transport but InProc runs its calls on goroutines of
	// their own) is not counted. Linux only (CPUTimeSupported); elsewhere it is 0.
	CPUTime bool
}

// Result is what a run produced.
type Result struct {
	// Stores holds every result written by store instructions, assembled whole from the
	// devices' blocks.
	Stores map[string]*kernels.Tensor
	// Devices holds the counters of each device, in the order of the programs.
	Devices []DeviceStats
	// Trace holds one event per executed instruction when Options.Trace is set, by device
	// then instruction.
	Trace []TraceEvent
}

// DeviceStats are the counters of one device.
//
// PeakBytes is the largest sum, over the instructions of the program, of the bytes of the
// live buffers just after the instruction: a buffer is live from the instruction that
// defines it (compute, constant, load, recv, all_gather, reduce_scatter, all_to_all) until
// the free that releases it, and weighs its declared type's Type.Bytes (elements × dtype
// size; an f16 buffer counts 2 bytes an element though kernels store it as f32). all_reduce
// and accumulate update in place and add nothing. Messages in flight and a collective's
// scratch are not counted: this is the accounting a plan predicts from its buffers.
//
// BytesSent and BytesReceived are what the transport reports it moved (see InProc for the
// in-process algorithms and how they match mesh.BytesSent).
type DeviceStats struct {
	Device        DeviceID
	PeakBytes     int64
	BytesSent     int64
	BytesReceived int64
	// FeedBytes are the bytes of the blocks its loads sliced from the run's feeds (the host's
	// data); StoreBytes those of its stores assembled into Result.Stores. A Session's
	// resident params and state count in neither: they stay on the device.
	FeedBytes  int64
	StoreBytes int64
	// Instrs is the number of instructions executed.
	Instrs int
	// Count and Time are per instruction kind, indexed by program.Kind.
	Count [program.NumKinds]int
	Time  [program.NumKinds]time.Duration
	// Under Options.CPUTime (zero and nil otherwise), CPU is Time in the CPU time of the
	// device's thread, and CPUSpans that time as the device ran: for each communication
	// instruction (collective, send, recv) in run order (program.Execution), the CPU time
	// of the work since the previous one, then its own; last, the work after the last one.
	// The clock is read around communication only (a read is a system call), so CPU splits
	// each span of work over its kinds in proportion to their wall time.
	CPU      [program.NumKinds]time.Duration
	CPUSpans []time.Duration
}

// Run executes one program per device, each on its own goroutine with its own buffers,
// over opts.Transport, and returns the stored results and per-device counters.
//
// Errors: an invalid program, a group or peer naming a device without a program, a missing
// or mistyped feed, stores that disagree or leave part of a result unwritten, sends never
// received. When a device fails (a kernel error, a kernel panic, which is recovered, a wait
// past the timeout), every device stops (their waits are cancelled) and Run returns that
// first failure as a *DeviceError naming the device and instruction. A cancelled ctx stops
// every device and Run returns an error wrapping ctx's. Run never hangs while ctx and the
// timeout are finite, even over a Transport that ignores its context.
func Run(ctx context.Context, programs []*program.Program, data Data, opts Options) (*Result, error) {
	if err := checkPrograms(programs); err != nil {
		return nil, err
	}
	opts, inproc := prepare(programs, opts)
	devs := make([]*device, len(programs))
	start := time.Now()
	for i, p := range programs {
		devs[i] = newDevice(p, data, &opts, start)
	}
	if err := runDevices(ctx, devs, inproc, opts); err != nil {
		return nil, err
	}
	return collect(devs, nil)
}

// prepare fills in opts' defaults: the timeout, and a fresh InProc over the programs'
// devices when there is no transport (returned too, for its checks), or the guard around
// another transport.
func prepare(programs []*program.Program, opts Options) (Options, *InProc) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	inproc, _ := opts.Transport.(*InProc)
	if opts.Transport == nil {
		devices := make([]DeviceID, len(programs))
		for i, p := range programs {
			devices[i] = p.Device
		}
		inproc = NewInProc(devices)
		opts.Transport = inproc
	}
	if inproc == nil {
		opts.Transport = guarded{opts.Transport}
	}
	return opts, inproc
}

// runDevices runs every device on its own goroutine until all finish, and returns the
// first failure, the caller's cancellation, or a send never received (over an InProc).
func runDevices(ctx context.Context, devs []*device, inproc *InProc, opts Options) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if opts.CPUTime {
		defer kernels.OneCore()()
	}
	var wg sync.WaitGroup
	for i := range devs {
		wg.Add(1)
		go func(d *device) {
			defer wg.Done()
			if err := d.run(runCtx); err != nil {
				cancel(err)
			}
		}(devs[i])
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("runtime: run cancelled: %w", err)
	}
	if err := context.Cause(runCtx); err != nil {
		return err
	}
	if inproc != nil {
		if pending := inproc.Pending(); len(pending) > 0 {
			return fmt.Errorf("runtime: %s", pending[0])
		}
	}
	return nil
}

// checkPrograms validates every program and what they say about each other: one program per
// device, and every group member and peer has a program.
func checkPrograms(programs []*program.Program) error {
	if len(programs) == 0 {
		return errors.New("runtime: no programs to run")
	}
	have := map[DeviceID]bool{}
	var errs ir.ErrorList
	for i, p := range programs {
		if p == nil {
			return fmt.Errorf("runtime: program %d is nil", i)
		}
		if have[p.Device] {
			return fmt.Errorf("runtime: two programs for device %d, expected one per device", p.Device)
		}
		have[p.Device] = true
		if err := p.Validate(); err != nil {
			var list ir.ErrorList
			if !errors.As(err, &list) {
				return err
			}
			errs = append(errs, list...)
		}
	}
	if err := errs.Err(); err != nil {
		return err
	}
	for _, p := range programs {
		for i := range p.Instrs {
			in := &p.Instrs[i]
			peers := in.Group
			if in.Kind == program.Send || in.Kind == program.Recv {
				peers = []DeviceID{in.Peer}
			}
			for _, d := range peers {
				if !have[d] {
					return ir.Errorf(p.Pos(i), "%s names device %d, which has no program", in.Kind, d)
				}
			}
		}
	}
	return nil
}

// collect assembles the stores, except those of the names in resident (which stay on
// their devices), and gathers the counters and trace, in program order.
func collect(devs []*device, resident map[string]bool) (*Result, error) {
	res := &Result{Stores: map[string]*kernels.Tensor{}}
	var asm assembler
	for _, d := range devs {
		res.Devices = append(res.Devices, d.stats)
		res.Trace = append(res.Trace, d.trace...)
		for _, s := range d.stores {
			if resident[s.name] {
				continue
			}
			res.Devices[len(res.Devices)-1].StoreBytes += tensorBytes(s.block)
			if err := asm.add(s); err != nil {
				return nil, err
			}
		}
	}
	if err := asm.finish(res.Stores); err != nil {
		return nil, err
	}
	return res, nil
}

// DeviceError is the failure of one device at one instruction.
type DeviceError struct {
	Device DeviceID
	// Index is the instruction's position in the program, Instr its text and Pos its place
	// in the program's text form; Microbatch the micro-batch its block ran for (−1 in a
	// block of the step).
	Index      int
	Microbatch int
	Instr      string
	Pos        ir.Pos
	// Peers are the devices it was waiting for when it timed out (nil otherwise).
	Peers []DeviceID
	Err   error
}

func (e *DeviceError) Error() string {
	if e.Microbatch >= 0 {
		return fmt.Sprintf("%s: device %d: instr %d (%s) of micro-batch %d: %v", e.Pos, e.Device, e.Index, e.Instr, e.Microbatch, e.Err)
	}
	return fmt.Sprintf("%s: device %d: instr %d (%s): %v", e.Pos, e.Device, e.Index, e.Instr, e.Err)
}

func (e *DeviceError) Unwrap() error { return e.Err }

// storeRec is one store a device made: its block of a result.
type storeRec struct {
	device DeviceID
	pos    ir.Pos
	name   string
	full   ir.Type
	off    []int
	block  *kernels.Tensor
}

// export is the store as a result carries it.
func (s storeRec) export() StoreBlock {
	return StoreBlock{Device: s.device, Pos: s.pos, Name: s.name, Full: s.full, Offsets: s.off, Block: s.block}
}

// assembler puts results together from blocks, checking that devices which write the same
// element (replicas) wrote bit-identical values and that every element is written.
type assembler struct {
	names   []string
	full    map[string]*kernels.Tensor
	written map[string][]DeviceID // per element, the first device that wrote it (-1: none)
	first   map[string]ir.Pos
}

func (a *assembler) add(s storeRec) error {
	if a.full == nil {
		a.full, a.written, a.first = map[string]*kernels.Tensor{}, map[string][]DeviceID{}, map[string]ir.Pos{}
	}
	dst, ok := a.full[s.name]
	if !ok {
		dst = kernels.New(s.full)
		a.full[s.name], a.first[s.name] = dst, s.pos
		a.written[s.name] = slices.Repeat([]DeviceID{-1}, dst.Len())
		a.names = append(a.names, s.name)
	} else if !dst.Type.Equal(s.full) {
		return ir.Errorf(s.pos, "store to %s as %s, but it was stored as %s", s.name, s.full, dst.Type).
			WithNote(a.first[s.name], "first stored here")
	}
	w := a.written[s.name]
	var err error
	forBlock(s.full.Shape, s.off, s.block.Type.Shape, func(di, si int) bool {
		switch {
		case w[di] < 0:
			w[di] = s.device
			copyElem(dst, di, s.block, si)
		case !sameValue(dst, di, s.block, si):
			err = ir.Errorf(s.pos, "device %d stores %v into %s at element %d, but device %d stored %v there, expected replicas to agree",
				s.device, s.block.At(si), s.name, di, w[di], dst.At(di))
			return false
		}
		return true
	})
	return err
}

func (a *assembler) finish(out map[string]*kernels.Tensor) error {
	for _, name := range a.names {
		missing := 0
		for _, d := range a.written[name] {
			if d < 0 {
				missing++
			}
		}
		if missing > 0 {
			return ir.Errorf(a.first[name], "stores to %s leave %d of %d elements unwritten, expected the devices' blocks to cover it",
				name, missing, len(a.written[name]))
		}
		out[name] = a.full[name]
	}
	return nil
}

// sameValue reports whether a[i] and b[j] hold the same value (NaN equals NaN): replicas
// computed by the same kernels in the same order must agree exactly.
func sameValue(a *kernels.Tensor, i int, b *kernels.Tensor, j int) bool {
	switch {
	case a.F32 != nil:
		x, y := a.F32[i], b.F32[j]
		return x == y || (x != x && y != y)
	case a.F64 != nil:
		x, y := a.F64[i], b.F64[j]
		return x == y || (x != x && y != y)
	}
	return a.Int[i] == b.Int[j]
}

func copyElem(dst *kernels.Tensor, i int, src *kernels.Tensor, j int) {
	switch {
	case dst.F32 != nil:
		dst.F32[i] = src.F32[j]
	case dst.F64 != nil:
		dst.F64[i] = src.F64[j]
	default:
		dst.Int[i] = src.Int[j]
	}
}
