package render

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/units"
)

// traceEvent is one event of the Chrome trace-event JSON runtime.Result.WriteTrace writes
// (runtime.ChromeEvent): a complete slice ("ph":"X") per executed instruction, named by
// runtime.EventName, on thread Tid = the device, with Args["instr"] its index in the
// device's program and Args["mb"] the micro-batch it ran for (−1 in a block of the step).
// Times are in microseconds. Args is read from the raw args of slices; metadata events
// ("ph":"M", which name the processes and threads) carry strings there.
type traceEvent struct {
	runtime.ChromeEvent
	Args map[string]int `json:"-"`
}

// ReadTrace reads a runtime trace (autopar run --trace) of plan p and turns it into a
// Schedule: per device, one block per task (the forward or backward of a micro-batch, the
// update) spanning its instructions, with the communication instructions (collectives,
// send, recv) inside it as Comm blocks. Which task an instruction belongs to comes from
// p's programs, the block that holds it, and the micro-batch the event ran for.
//
// A trace that is not JSON, has no instruction events, or whose instructions are not the
// ones p's programs have at those places (a trace of another plan) is an error.
func ReadTrace(r io.Reader, p *plan.Plan) (*Schedule, error) {
	if p == nil || p.Step() == nil {
		return nil, errNoStep
	}
	evs, err := decodeTrace(r)
	if err != nil {
		return nil, err
	}
	progs, err := p.Programs()
	if err != nil {
		return nil, fmt.Errorf("render: trace: lowering the plan: %w", err)
	}
	return traceSchedule(evs, p, progs)
}

// maxTraceBytes bounds what ReadTrace reads: a trace of one step of a large plan is tens of
// MB; a file past this is not one (or /dev/zero), and is refused before it fills memory.
const maxTraceBytes = 1 << 30

// decodeTrace reads the trace-event JSON document: one object with a traceEvents list.
func decodeTrace(r io.Reader) ([]traceEvent, error) {
	var doc struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	lr := &io.LimitedReader{R: r, N: maxTraceBytes + 1}
	dec := json.NewDecoder(lr)
	if err := dec.Decode(&doc); err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("render: trace: larger than %d bytes, expected the trace of one step", maxTraceBytes)
		}
		if err == io.EOF {
			return nil, fmt.Errorf("render: trace: the file is empty, expected the Chrome trace-event JSON of autopar run --trace")
		}
		return nil, fmt.Errorf("render: trace: not Chrome trace-event JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("render: trace: data after the JSON object, expected one Chrome trace-event document")
	}
	return doc.TraceEvents, nil
}

// traceSchedule folds decoded events into the Schedule of plan p, whose programs are progs.
func traceSchedule(evs []traceEvent, p *plan.Plan, progs []*program.Program) (*Schedule, error) {
	byDev := map[int]*program.Program{}
	for _, prog := range progs {
		byDev[int(prog.Device)] = prog
	}
	events, err := checkEvents(evs, byDev)
	if err != nil {
		return nil, err
	}
	out := &Schedule{Microbatches: p.Microbatches, Rows: rowsOf(p)}
	for r, row := range out.Rows {
		out.Blocks = append(out.Blocks, traceBlocks(r, events[row.Device], byDev[row.Device])...)
	}
	sortBlocks(out.Blocks)
	out.Title = fmt.Sprintf("%s on %s, %s schedule, %d micro-batches: measured step %s (runtime trace); the plan predicted %s",
		p.Model, p.Cluster.Name, p.Schedule, p.Microbatches, units.Seconds(out.End()), units.Seconds(p.Predicted.StepTime))
	return out, nil
}

// maxTraceMicros bounds an event's start and duration: a year in µs. Past it, a trace is
// not of one training step, and differences of times would lose every digit.
const maxTraceMicros = 365 * 24 * 3600 * 1e6

// checkEvents keeps the instruction events, checks each against the plan's programs, and
// returns them per device in time order with times in seconds from the first event.
func checkEvents(evs []traceEvent, progs map[int]*program.Program) (map[int][]traceEvent, error) {
	out := map[int][]traceEvent{}
	t0 := math.Inf(1)
	n := 0
	for i, e := range evs {
		if e.Ph != "X" {
			continue
		}
		prog := progs[e.Tid]
		if prog == nil {
			return nil, fmt.Errorf("render: trace event %d: device %d has no program in the plan: the trace is of another plan", i, e.Tid)
		}
		if err := json.Unmarshal(e.ChromeEvent.Args, &e.Args); err != nil {
			return nil, fmt.Errorf("render: trace event %d: args %s: expected integer instr and mb", i, e.ChromeEvent.Args)
		}
		if e.Dur < 0 || math.IsNaN(e.Ts) || math.IsInf(e.Ts, 0) {
			return nil, fmt.Errorf("render: trace event %d: start %g µs, duration %g µs, expected a finite start and a duration ≥ 0", i, e.Ts, e.Dur)
		}
		k, ok := e.Args["instr"]
		if !ok || k < 0 || k >= len(prog.Instrs) {
			return nil, fmt.Errorf("render: trace event %d: instruction %d of device %d is not in its program of %d instructions: the trace is of another plan",
				i, k, e.Tid, len(prog.Instrs))
		}
		if !(e.Ts >= 0 && e.Ts <= maxTraceMicros && e.Dur >= 0 && e.Dur <= maxTraceMicros) {
			return nil, fmt.Errorf("render: trace event %d: start %g µs, duration %g µs, expected both in [0, %g] µs", i, e.Ts, e.Dur, float64(maxTraceMicros))
		}
		mb, ok := e.Args["mb"]
		if j := prog.BlockOf(k); len(prog.Blocks) > 0 && prog.Blocks[j].PerMicrobatch {
			if !ok || mb < 0 || mb >= prog.Microbatches {
				return nil, fmt.Errorf("render: trace event %d: device %d instruction %d runs per micro-batch, the trace says micro-batch %s, expected 0 to %d: the trace is of another plan",
					i, e.Tid, k, argText(mb, ok), prog.Microbatches-1)
			}
		} else if ok && mb != -1 {
			return nil, fmt.Errorf("render: trace event %d: device %d instruction %d runs once per step, the trace says micro-batch %d, expected -1: the trace is of another plan",
				i, e.Tid, k, mb)
		}
		if !ok {
			mb = -1
		}
		want := runtime.EventName(prog, k, mb)
		if op, _, _ := strings.Cut(want, " "); e.Name == op && want != op {
			return nil, fmt.Errorf("render: trace event %d is named %q, as autopar run wrote traces before naming events by value (%q): record the trace again", i, e.Name, want)
		}
		if want != e.Name {
			return nil, fmt.Errorf("render: trace event %d: device %d instruction %d is %q in the plan's program, the trace says %q: the trace is of another plan",
				i, e.Tid, k, want, e.Name)
		}
		t0 = min(t0, e.Ts)
		out[e.Tid] = append(out[e.Tid], e)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("render: trace: no instruction events, expected the Chrome trace of autopar run --trace")
	}
	for d, list := range out {
		for i := range list {
			list[i].Ts = (list[i].Ts - t0) * 1e-6
			list[i].Dur *= 1e-6
		}
		sort.SliceStable(list, func(i, j int) bool { return list[i].Ts < list[j].Ts })
		out[d] = list
	}
	return out, nil
}

func argText(v int, ok bool) string {
	if !ok {
		return "none"
	}
	return strconv.Itoa(v)
}

func isComm(k program.Kind) bool {
	return k.IsCollective() || k == program.Send || k == program.Recv
}

// eventTask is the task an executed instruction belongs to: its block's (the prologue
// counts as the forward of micro-batch 0, which it opens), with the micro-batch the event
// says the block ran for.
func eventTask(prog *program.Program, e traceEvent) task {
	j := prog.BlockOf(e.Args["instr"])
	if j < 0 || len(prog.Blocks) == 0 {
		return task{Update, -1}
	}
	if j == program.BlockPrologue { // its loads are the first forward's
		return task{Forward, 0}
	}
	if t, ok := blockTask(j, e.Args["mb"]); ok {
		return t
	}
	return task{Update, -1}
}

// traceBlocks folds one device's events into blocks: a task block from the start of its
// first instruction to the end of its last, and a Comm block per run of communication
// instructions inside it (frees between them do not break a run), so that a step of
// thousands of instructions stays a readable handful of bars. The receives a task opens
// with are waits for the previous stage more than transfers (in-process, a transfer is a
// copy), so the bar starts after them and their time shows as a gap: the bubble; the
// tooltip says how long the task waited.
func traceBlocks(row int, evs []traceEvent, prog *program.Program) []Block {
	var out []Block
	var bar, comm *Block
	var cur task
	var instrs, comms int
	var leading bool
	var waited float64
	closeComm := func() {
		if comm != nil {
			comm.Note = fmt.Sprintf("device %d communication in %s: %s, %s", prog.Device, taskName(cur),
				plural(comms, "instruction"), units.Seconds(comm.End-comm.Start))
			out = append(out, *comm)
			comm, comms = nil, 0
		}
	}
	closeBar := func() {
		closeComm()
		if bar != nil {
			bar.Note = fmt.Sprintf("device %d %s: %s, %s", prog.Device, taskName(cur),
				plural(instrs, "instruction"), units.Seconds(bar.End-bar.Start))
			if waited > 0 {
				bar.Note += fmt.Sprintf(" after waiting %s for its input", units.Seconds(waited))
			}
			out = append(out, *bar)
			bar, instrs = nil, 0
		}
	}
	for _, e := range evs {
		k := e.Args["instr"]
		t, in := eventTask(prog, e), &prog.Instrs[k]
		if bar == nil || t != cur {
			closeBar()
			cur, bar = t, &Block{Row: row, Kind: t.kind, Microbatch: t.mb, Start: e.Ts, End: e.Ts}
			leading, waited = true, 0
		}
		instrs++
		bar.End = max(bar.End, e.Ts+e.Dur)
		switch {
		case leading && in.Kind == program.Recv:
			waited += e.Dur
			bar.Start = bar.End
		case leading && in.Kind == program.Free:
		case leading:
			leading = false
			fallthrough
		default:
			commRun(&comm, &comms, row, t, in, e, closeComm)
		}
	}
	closeBar()
	return out
}

// commRun extends the run of communication instructions with e, starts one, or (for an
// instruction other than a free) closes it.
func commRun(comm **Block, comms *int, row int, t task, in *program.Instr, e traceEvent, closeComm func()) {
	switch {
	case isComm(in.Kind) && *comm == nil:
		*comm = &Block{Row: row, Kind: Comm, Microbatch: t.mb, Start: e.Ts, End: e.Ts + e.Dur}
		*comms = 1
	case isComm(in.Kind):
		(*comm).End = max((*comm).End, e.Ts+e.Dur)
		*comms++
	case in.Kind != program.Free:
		closeComm()
	}
}
