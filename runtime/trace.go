package runtime

import (
	"encoding/json"
	"io"
	"time"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
)

// TraceEvent is one executed instruction: when it started, relative to the start of the run,
// and how long it took.
type TraceEvent struct {
	Device DeviceID
	Index  int
	// Microbatch is the micro-batch the instruction ran for (−1 in a block of the step).
	Microbatch int
	Kind       codegen.Kind
	Op         ir.Op // for compute
	Start      time.Duration
	Dur        time.Duration
}

// chromeEvent is one complete event ("ph":"X") of the Chrome trace-event format, which
// Perfetto and chrome://tracing read. Times are in microseconds.
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]int `json:"args"`
}

// WriteTrace writes r.Trace as Chrome trace-event JSON: one row (thread) per device, one
// slice per executed instruction, named by its kind (by its op for compute), with its index
// in the program ("instr") and the micro-batch it ran for ("mb", −1 in a block of the step)
// as args.
func (r *Result) WriteTrace(w io.Writer) error {
	events := make([]chromeEvent, len(r.Trace))
	for i, e := range r.Trace {
		name := e.Kind.String()
		if e.Kind == codegen.Compute {
			name = e.Op.String()
		}
		events[i] = chromeEvent{Name: name, Cat: e.Kind.String(), Ph: "X",
			Ts: float64(e.Start.Nanoseconds()) / 1e3, Dur: float64(e.Dur.Nanoseconds()) / 1e3,
			Tid: int(e.Device), Args: map[string]int{"instr": e.Index, "mb": e.Microbatch}}
	}
	return json.NewEncoder(w).Encode(struct {
		TraceEvents []chromeEvent `json:"traceEvents"`
	}{events})
}
