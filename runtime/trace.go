package runtime

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
)

// TraceEvent is one executed instruction: when it started, relative to the start of the run,
// and how long it took.
type TraceEvent struct {
	Device DeviceID
	Index  int
	// Microbatch is the micro-batch the instruction ran for (−1 in a block of the step).
	Microbatch int
	Kind       program.Kind
	Op         ir.Op // for compute
	// Name is the event's name in a trace, EventName's: what ran, on which value, for
	// which micro-batch.
	Name  string
	Start time.Duration
	Dur   time.Duration
	// CPU is the CPU time of the device's thread over the instruction, under
	// Options.CPUTime (0 otherwise): its clock is then read around every instruction of a
	// traced run, which adds two system calls to each (the spans and DeviceStats.CPU
	// include them).
	CPU time.Duration
}

// EventName names instruction pc of p run for micro-batch mb (−1 in a block of the step) as
// a trace shows it: its op (compute) or kind, the value it defines (or, for send, store
// and free, the first it reads), and the micro-batch: "matmul l0.mlp.w1 mb3",
// "send d.l1.relu mb0", "all_reduce grad.l0.fc.w". render.ReadTrace checks a trace's names
// against the plan's programs with it.
func EventName(p *program.Program, pc, mb int) string {
	in := &p.Instrs[pc]
	name := in.Kind.String()
	if in.Kind == program.Compute {
		name = in.Op.String()
	}
	switch {
	case in.Out != program.NoBuffer:
		name += " " + p.Buffers[in.Out].Name
	case len(in.Args) > 0:
		name += " " + p.Buffers[in.Args[0]].Name
		if len(in.Args) > 1 {
			name += " +" + strconv.Itoa(len(in.Args)-1)
		}
	}
	if mb >= 0 {
		name += " mb" + strconv.Itoa(mb)
	}
	return name
}

// TraceOptions says what WriteTraceWith writes beyond the instructions.
type TraceOptions struct {
	// Frees keeps the free instructions, which are nearly half a program's and take no
	// time worth seeing; they are left out by default.
	Frees bool
	// Stages lists each pipeline stage's devices (a plan's Stages[s].Devices): the trace
	// then shows one process per stage, "stage S", holding its devices. Without it, every
	// device is a thread of one process.
	Stages [][]int
}

// ChromeEvent is one event of the Chrome trace-event format, which Perfetto and
// chrome://tracing read: a complete slice ("ph":"X", times in microseconds) or a metadata
// event ("ph":"M") naming a process or a thread. WriteTraceWith writes them and
// render.ReadTrace reads them back; Args stays raw JSON because metadata events carry
// strings there and slices integers.
type ChromeEvent struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat,omitempty"`
	Ph   string          `json:"ph"`
	Ts   float64         `json:"ts"`
	Dur  float64         `json:"dur,omitempty"`
	Pid  int             `json:"pid"`
	Tid  int             `json:"tid"`
	Args json.RawMessage `json:"args"`
}

// args encodes an event's args; maps of strings and ints always encode.
func args(m map[string]any) json.RawMessage {
	b, err := json.Marshal(m)
	if err != nil {
		panic("runtime: trace args: " + err.Error())
	}
	return b
}

// WriteTrace is WriteTraceWith without frees, all devices in one process.
func (r *Result) WriteTrace(w io.Writer) error { return r.WriteTraceWith(w, TraceOptions{}) }

// WriteTraceWith writes r.Trace as Chrome trace-event JSON: metadata events naming each
// process ("stage S", or "autopar run") and thread ("device N"), then one slice per
// executed instruction on thread tid = its device, named by EventName, with its kind as
// category and its index in the program ("instr") and micro-batch ("mb", −1 in a block
// of the step) as args. A device that no stage lists is an error.
func (r *Result) WriteTraceWith(w io.Writer, o TraceOptions) error {
	stageOf := map[DeviceID]int{}
	for s, devs := range o.Stages {
		for _, d := range devs {
			stageOf[DeviceID(d)] = s
		}
	}
	var devices []DeviceID
	seen := map[DeviceID]bool{}
	for _, e := range r.Trace {
		if !seen[e.Device] {
			seen[e.Device] = true
			devices = append(devices, e.Device)
		}
	}
	sort.Slice(devices, func(i, j int) bool { return devices[i] < devices[j] })
	pid := func(d DeviceID) (int, error) {
		if o.Stages == nil {
			return 0, nil
		}
		s, ok := stageOf[d]
		if !ok {
			return 0, fmt.Errorf("runtime: trace: device %d is in no stage of the %d given", d, len(o.Stages))
		}
		return s, nil
	}
	events := metadata(o.Stages)
	for _, d := range devices {
		p, err := pid(d)
		if err != nil {
			return err
		}
		events = append(events,
			ChromeEvent{Name: "thread_name", Ph: "M", Pid: p, Tid: int(d), Args: args(map[string]any{"name": "device " + strconv.Itoa(int(d))})},
			ChromeEvent{Name: "thread_sort_index", Ph: "M", Pid: p, Tid: int(d), Args: args(map[string]any{"sort_index": int(d)})})
	}
	for _, e := range r.Trace {
		if e.Kind == program.Free && !o.Frees {
			continue
		}
		p, _ := pid(e.Device)
		events = append(events, ChromeEvent{Name: e.Name, Cat: e.Kind.String(), Ph: "X",
			Ts: float64(e.Start.Nanoseconds()) / 1e3, Dur: float64(e.Dur.Nanoseconds()) / 1e3,
			Pid: p, Tid: int(e.Device), Args: args(map[string]any{"instr": e.Index, "mb": e.Microbatch})})
	}
	return json.NewEncoder(w).Encode(struct {
		TraceEvents []ChromeEvent `json:"traceEvents"`
	}{events})
}

// metadata names the processes: one per stage, in stage order, or one for the run.
func metadata(stages [][]int) []ChromeEvent {
	if stages == nil {
		return []ChromeEvent{{Name: "process_name", Ph: "M", Args: args(map[string]any{"name": "autopar run"})}}
	}
	var out []ChromeEvent
	for s := range stages {
		out = append(out,
			ChromeEvent{Name: "process_name", Ph: "M", Pid: s, Args: args(map[string]any{"name": "stage " + strconv.Itoa(s)})},
			ChromeEvent{Name: "process_sort_index", Ph: "M", Pid: s, Args: args(map[string]any{"sort_index": s})})
	}
	return out
}
