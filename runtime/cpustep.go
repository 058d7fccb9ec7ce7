package runtime

import (
	"fmt"
	"time"

	"github.com/autopar/autopar/program"
)

// CPUStep is the step a run would take with one core per device and nothing else on the
// machine: every device's work and communication, each taking the CPU time its thread
// spent on it (DeviceStats.CPUSpans, recorded under Options.CPUTime), replayed in each
// program's run order along the dependencies between devices. A recv starts once its send has finished
// (a send does not wait), a collective once every member of its group has reached it,
// and then takes the member's own CPU time. It returns the time each device finishes, in
// the order of programs, and the step, the latest of them.
//
// Waking a device that waits costs no CPU time and is not counted, nor is work a transport
// does on goroutines of its own. devices are the counters of a run of programs, in the
// same order (Result.Devices); an error says the counters do not belong to the programs.
func CPUStep(programs []*program.Program, devices []DeviceStats) ([]time.Duration, time.Duration, error) {
	if len(devices) != len(programs) {
		return nil, 0, fmt.Errorf("runtime: cpu step: %d devices' counters for %d programs", len(devices), len(programs))
	}
	type pos struct{ pc, mb int }
	type sendKey struct {
		from, to DeviceID
		tag      program.Tag
	}
	type collKey struct {
		group string
		seq   int
	}
	type coll struct {
		arrived int
		start   time.Duration
	}
	n := len(programs)
	runs := make([][]pos, n)
	for i, p := range programs {
		for pc, mb := range p.Execution {
			if k := p.Instrs[pc].Kind; k.IsCollective() || k == program.Send || k == program.Recv {
				runs[i] = append(runs[i], pos{pc, mb})
			}
		}
		if len(devices[i].CPUSpans) != 2*len(runs[i])+1 {
			return nil, 0, fmt.Errorf("runtime: cpu step: device %d has %d CPU spans for a program that communicates %d times (run it with Options.CPUTime)",
				p.Device, len(devices[i].CPUSpans), len(runs[i]))
		}
	}
	var (
		clock   = make([]time.Duration, n)
		at      = make([]int, n) // the next communication of each device
		sent    = map[sendKey][]time.Duration{}
		colls   = map[collKey]*coll{}
		seq     = make([]map[string]int, n)
		waiting = make([]*collKey, n) // the collective device i has reached and waits in
		worked  = make([]bool, n)     // device i's clock holds the work before run at[i]
	)
	for i := range seq {
		seq[i] = map[string]int{}
	}
	for {
		progress, done := false, 0
		for i, p := range programs {
			spans := devices[i].CPUSpans
		run:
			for at[i] < len(runs[i]) {
				if !worked[i] {
					clock[i] += spans[2*at[i]]
					worked[i] = true
				}
				r := runs[i][at[i]]
				in := &p.Instrs[r.pc]
				cpu := spans[2*at[i]+1]
				switch in.Kind {
				case program.Send:
					clock[i] += cpu
					k := sendKey{p.Device, in.Peer, program.TransferTag(in, r.mb)}
					sent[k] = append(sent[k], clock[i])
				case program.Recv:
					k := sendKey{in.Peer, p.Device, program.TransferTag(in, r.mb)}
					q := sent[k]
					if len(q) == 0 {
						break run
					}
					clock[i] = max(clock[i], q[0]) + cpu
					sent[k] = q[1:]
				default: // a collective
					if waiting[i] == nil {
						g := groupKey(in.Group)
						k := collKey{g, seq[i][g]}
						seq[i][g]++
						c := colls[k]
						if c == nil {
							c = &coll{}
							colls[k] = c
						}
						c.arrived++
						c.start = max(c.start, clock[i])
						waiting[i] = &k
						progress = true
					}
					c := colls[*waiting[i]]
					if c.arrived < len(in.Group) {
						break run
					}
					clock[i] = c.start + cpu
					waiting[i] = nil
				}
				at[i]++
				worked[i] = false
				progress = true
			}
			if at[i] == len(runs[i]) {
				if !worked[i] {
					clock[i] += spans[len(spans)-1]
					worked[i] = true
				}
				done++
			}
		}
		if done == n {
			break
		}
		if !progress {
			return nil, 0, fmt.Errorf("runtime: cpu step: the programs wait on each other (a recv without its send, or a collective not every member reaches)")
		}
	}
	var step time.Duration
	for _, c := range clock {
		step = max(step, c)
	}
	return clock, step, nil
}
