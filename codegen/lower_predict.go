package codegen

import "github.com/autopar/autopar/program"

// DeviceCounters are the counters a run of one program should measure: the runtime's
// DeviceStats PeakBytes, BytesSent and BytesReceived.
type DeviceCounters struct {
	Device        program.DeviceID
	PeakBytes     int64
	BytesSent     int64
	BytesReceived int64
}

// Predict computes, per program (in order), the counters the runtime measures, under its
// accounting exactly (runtime.DeviceStats). It sums each block once and then each loop of
// the schedule once, so its time does not depend on the micro-batch count:
//
//   - a buffer weighs its declared type's bytes from the instruction that defines it to
//     the free that releases it; all_reduce and accumulate add nothing; the peak is taken
//     after every instruction;
//   - traffic is what the in-process transport's exchanges move: a send or a receive the
//     tensor's bytes; an all-gather sends its block to and receives one from each of the
//     n−1 others; a reduce-scatter and an all-to-all move n−1 of their n blocks each way;
//     an all-reduce is a reduce-scatter of the flat elements in chunks [r·L/n, (r+1)·L/n)
//     followed by an all-gather of the summed chunks, so rank r sends and receives
//     (L − c_r) + (n−1)·c_r elements, c_r its chunk's length.
//
// The plan p is not read beyond the programs; it is taken so that callers predict for
// the plan the programs came from.
func Predict(_ *Plan, progs []*program.Program) []DeviceCounters {
	out := make([]DeviceCounters, len(progs))
	for i, p := range progs {
		out[i] = predictOne(p)
	}
	return out
}

func predictOne(p *program.Program) DeviceCounters {
	// Per block: the bytes it moves, the change of the live bytes over it, and the highest
	// live bytes after one of its defining instructions, relative to the start.
	type effect struct {
		sent, recv, delta, peak int64
		defines                 bool
	}
	blocks, _ := p.BlockSchedule()
	eff := make([]effect, len(blocks))
	for j, bl := range blocks {
		e := &eff[j]
		for i := bl.Start; i < bl.End; i++ {
			in := &p.Instrs[i]
			sent, recv := traffic(p, in)
			e.sent += sent
			e.recv += recv
			switch {
			case in.Kind == program.Free:
				for _, b := range in.Args {
					e.delta -= p.Buffers[b].Type.Bytes()
				}
			case in.Out != program.NoBuffer && in.Kind != program.AllReduce:
				e.delta += p.Buffers[in.Out].Type.Bytes()
				if !e.defines || e.delta > e.peak {
					e.peak = e.delta
				}
				e.defines = true
			}
		}
	}
	// Every iteration of a loop moves the same bytes and changes the live bytes by the same
	// amount, so its highest point is in its first or its last iteration.
	c := DeviceCounters{Device: p.Device}
	var live int64
	_, sched := p.BlockSchedule()
	for _, l := range sched {
		n := int64(l.To - l.From)
		if n <= 0 {
			continue
		}
		var it effect // one iteration
		for _, call := range l.Body {
			e := &eff[call.Block]
			it.sent += e.sent
			it.recv += e.recv
			if e.defines && (!it.defines || it.delta+e.peak > it.peak) {
				it.peak, it.defines = it.delta+e.peak, true
			}
			it.delta += e.delta
		}
		c.BytesSent += n * it.sent
		c.BytesReceived += n * it.recv
		if it.defines {
			c.PeakBytes = max(c.PeakBytes, live+it.peak, live+(n-1)*it.delta+it.peak)
		}
		live += n * it.delta
	}
	return c
}

// traffic returns the bytes one instruction sends and receives.
func traffic(p *program.Program, in *program.Instr) (sent, recv int64) {
	n := int64(len(in.Group))
	var x int64
	if len(in.Args) > 0 {
		x = p.Buffers[in.Args[0]].Type.Bytes()
	}
	switch in.Kind {
	case program.Send:
		return x, 0
	case program.Recv:
		b := p.Buffers[in.Out].Type.Bytes()
		return 0, b
	case program.AllGather:
		return (n - 1) * x, (n - 1) * x
	case program.ReduceScatter, program.AllToAll:
		return (n - 1) * (x / n), (n - 1) * (x / n)
	case program.AllReduce:
		t := p.Buffers[in.Args[0]].Type
		size := int64(t.DType.Size())
		l := t.Shape.NumElements()
		r := int64(program.Rank(in.Group, p.Device))
		c := (r+1)*l/n - r*l/n
		moved := (l - c + (n-1)*c) * size
		return moved, moved
	}
	return 0, 0
}
