package render

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/internal/golden"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
)

// runTrace runs one step of p on the runtime with tracing on and returns its trace JSON.
func runTrace(t *testing.T, p *plan.Plan) []byte {
	t.Helper()
	progs, err := p.Programs()
	require.NoError(t, err)
	opt := passes.Optimizer{Kind: p.Optimizer.Kind, LR: p.Optimizer.LR, Momentum: p.Optimizer.Momentum}
	full, err := passes.TrainingStep(p.Forward(), opt)
	require.NoError(t, err)
	feeds := interp.InitParams(full, 1)
	data, err := interp.GenerateInputs(full, 2)
	require.NoError(t, err)
	for k, v := range data {
		feeds[k] = v
	}
	res, err := runtime.Run(context.Background(), progs, runtime.Data(feeds), runtime.Options{Trace: true})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, res.WriteTrace(&buf))
	return buf.Bytes()
}

// taskBars lists the task blocks of each row, in time order.
func taskBars(s *Schedule) map[int][]task {
	out := map[int][]task{}
	for _, b := range s.Blocks {
		if b.Kind != Comm {
			out[b.Row] = append(out[b.Row], task{b.Kind, b.Microbatch})
		}
	}
	return out
}

// A measured trace, folded into tasks, runs each stage's tasks in the order codegen
// unrolled them: every instruction was put in its own task, none in a neighbour's.
func TestReadTraceFollowsTheSchedule(t *testing.T) {
	gpt := planCase{"gpt-cpu4-pp", "gpt-tiny", "cpu:4", autopar.Options{Microbatches: 4, Manual: &autopar.Manual{TP: 2, PP: 2, DP: 1}}}
	for _, c := range append(planCases[1:], gpt) {
		t.Run(c.name, func(t *testing.T) {
			p := compilePlan(t, c)
			s, err := ReadTrace(bytes.NewReader(runTrace(t, p)), p)
			require.NoError(t, err)
			sched, err := program.ParseSchedule(p.Schedule)
			require.NoError(t, err)
			bars := taskBars(s)
			for r, row := range s.Rows {
				require.GreaterOrEqual(t, row.Stage, 0)
				want := stageOrder(sched, len(p.Stages), row.Stage, p.Microbatches)
				assert.Equal(t, want, bars[r], "device %d (stage %d)", row.Device, row.Stage)
			}
			for _, b := range s.Blocks {
				assert.LessOrEqual(t, b.Start, b.End, b.Note)
				assert.GreaterOrEqual(t, b.Start, 0.0, b.Note)
			}
		})
	}
}

// syntheticTrace is a trace of p's programs where the i-th executed instruction of every
// device starts at i µs and lasts 1 µs (3 µs for a recv, to show a wait): deterministic,
// for goldens.
func syntheticTrace(t testing.TB, p *plan.Plan) []byte {
	t.Helper()
	progs, err := p.Programs()
	require.NoError(t, err)
	type ev struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Tid  int            `json:"tid"`
		Args map[string]int `json:"args"`
	}
	var evs []ev
	for _, prog := range progs {
		ts := 0.0
		for i, mb := range prog.Execution {
			in := &prog.Instrs[i]
			if in.Kind == program.Free {
				continue // as runtime.WriteTrace leaves them out
			}
			dur := 1.0
			if in.Kind == program.Recv {
				dur = 3
			}
			evs = append(evs, ev{Name: runtime.EventName(prog, i, mb), Cat: in.Kind.String(), Ph: "X", Ts: ts, Dur: dur,
				Tid: int(prog.Device), Args: map[string]int{"instr": i, "mb": mb}})
			ts += dur
		}
	}
	data, err := json.Marshal(map[string]any{"traceEvents": evs})
	require.NoError(t, err)
	return data
}

func TestTraceTimelineGolden(t *testing.T) {
	c := planCases[1]
	p := compilePlan(t, c)
	s, err := ReadTrace(bytes.NewReader(syntheticTrace(t, p)), p)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, Timeline(&buf, s))
	requireXML(t, buf.Bytes())
	golden.Check(t, c.name+"-trace.svg", buf.String())
}

func TestReadTraceErrors(t *testing.T) {
	p := compilePlan(t, planCases[1])
	good := string(syntheticTrace(t, p))
	other := compilePlan(t, planCases[0])
	progs, err := p.Programs()
	require.NoError(t, err)
	var dev0 *program.Program
	for _, prog := range progs {
		if prog.Device == 0 {
			dev0 = prog
		}
	}
	require.NotNil(t, dev0)
	fwd, upd := dev0.Blocks[1].Start, dev0.Blocks[3].Start
	fwdName, fwdInstr := runtime.EventName(dev0, fwd, 0), strconv.Itoa(fwd)
	updName, updInstr := runtime.EventName(dev0, upd, -1), strconv.Itoa(upd)
	tests := []struct {
		name, trace string
		plan        *plan.Plan
		want        string
	}{
		{"not json", "{", p, "not Chrome trace-event JSON"},
		{"empty", "", p, "the file is empty"},
		{"trailing data", `{"traceEvents":[]} {}`, p, "data after the JSON object"},
		{"far future", `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":1e300,"dur":1,"tid":2,"args":{"instr":0}}]}`, p, "expected both in [0,"},
		{"negative start", `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":-1,"dur":1,"tid":2,"args":{"instr":0}}]}`, p, "start -1 µs"},
		{"no events", `{"traceEvents":[]}`, p, "no instruction events"},
		{"unknown device", `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":0,"dur":1,"tid":9,"args":{"instr":0}}]}`, p, "device 9 has no program"},
		{"instr out of range", `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":99999}}]}`, p, "is not in its program"},
		{"wrong instruction", `{"traceEvents":[{"name":"softmax","cat":"compute","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":0}}]}`, p, `the trace says "softmax"`},
		{"old naming", `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":0,"dur":1,"tid":2,"args":{"instr":0}}]}`, p, "record the trace again"},
		{"negative duration", `{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":0,"dur":-1,"tid":2,"args":{"instr":0}}]}`, p, "duration"},
		{"another plan", good, other, "the trace is of another plan"},
		{"no micro-batch", `{"traceEvents":[{"name":"` + fwdName + `","cat":"x","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":` + fwdInstr + `}}]}`, p, "runs per micro-batch, the trace says micro-batch none"},
		{"micro-batch out of range", `{"traceEvents":[{"name":"` + fwdName + `","cat":"x","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":` + fwdInstr + `,"mb":4}}]}`, p, "the trace says micro-batch 4, expected 0 to 3"},
		{"micro-batch of the step", `{"traceEvents":[{"name":"` + updName + `","cat":"x","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":` + updInstr + `,"mb":0}}]}`, p, "runs once per step, the trace says micro-batch 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tc.trace), tc.plan)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = ReadTrace(strings.NewReader(good), &plan.Plan{})
	assert.ErrorIs(t, err, errNoStep)
}
