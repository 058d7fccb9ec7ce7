package runtime

import (
	"context"
	"fmt"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// This file is the seam for transports that run one device per process (runtime/mpi): each
// process runs its own device with RunDevice, the processes exchange their DeviceResults,
// and Assemble puts them together as Run would have.

// DeviceResult is what one device produced in a run: its counters, its blocks of the stored
// results and, with Options.Trace, its trace. It holds only exported plain data, so it can
// be encoded (encoding/gob) and sent to another process.
type DeviceResult struct {
	Stats  DeviceStats
	Stores []StoreBlock
	Trace  []TraceEvent
}

// StoreBlock is one store instruction's block of a result: Block is the part of Name (of
// type Full) at Offsets.
type StoreBlock struct {
	Device  DeviceID
	Pos     ir.Pos
	Name    string
	Full    ir.Type
	Offsets []int
	Block   *kernels.Tensor
}

// RunDevice executes the program of device self alone, over opts.Transport, which must
// connect it to the processes running the other programs. programs is the whole set (every
// process passes the same), checked as Run checks it. Trace times count from start, which
// the processes should agree on (after a barrier, say) for their traces to line up.
//
// It does not wait for sends still in flight, nor check that every send was received: that
// is the transport's business once every process is done.
func RunDevice(ctx context.Context, programs []*program.Program, self DeviceID, data Data, opts Options, start time.Time) (*DeviceResult, error) {
	if err := checkPrograms(programs); err != nil {
		return nil, err
	}
	if opts.Transport == nil {
		return nil, fmt.Errorf("runtime: RunDevice needs a transport to the other devices")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	var prog *program.Program
	for _, p := range programs {
		if p.Device == self {
			prog = p
		}
	}
	if prog == nil {
		return nil, fmt.Errorf("runtime: no program for device %d among the %d programs", self, len(programs))
	}
	d := newDevice(prog, data, &opts, start)
	if err := d.run(ctx); err != nil {
		if err == errStopped {
			return nil, fmt.Errorf("runtime: device %d: run cancelled: %w", self, ctx.Err())
		}
		return nil, err
	}
	res := &DeviceResult{Stats: d.stats, Trace: d.trace}
	for _, s := range d.stores {
		res.Stores = append(res.Stores, s.export())
	}
	return res, nil
}

// Assemble puts the results of every device together as Run does: stores assembled whole
// (replicas must agree bit for bit, every element must be written), counters and traces in
// the order of parts.
func Assemble(parts []*DeviceResult) (*Result, error) {
	res := &Result{Stores: map[string]*kernels.Tensor{}}
	var asm assembler
	for _, p := range parts {
		res.Devices = append(res.Devices, p.Stats)
		res.Trace = append(res.Trace, p.Trace...)
		for _, s := range p.Stores {
			rec := storeRec{device: s.Device, pos: s.Pos, name: s.Name, full: s.Full, off: s.Offsets, block: s.Block}
			if err := asm.add(rec); err != nil {
				return nil, err
			}
		}
	}
	if err := asm.finish(res.Stores); err != nil {
		return nil, err
	}
	return res, nil
}
