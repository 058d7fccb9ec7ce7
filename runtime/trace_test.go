package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
)

type chromeDoc struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

func traceOf(t *testing.T, res *Result, o TraceOptions) chromeDoc {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, res.WriteTraceWith(&buf, o))
	var doc chromeDoc
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	return doc
}

// TestTrace checks the Chrome trace Perfetto reads: a process per stage and a thread per
// device named by metadata events, slices named by value, frees only when asked for.
func TestTrace(t *testing.T) {
	res, err := Run(context.Background(), pipeline(2, 2, 2, 4), Data{
		"x": random(typ(ir.F64, 4, 4), 1), "w0": random(typ(ir.F64, 4, 4), 2), "w1": random(typ(ir.F64, 4, 4), 3),
	}, Options{Trace: true})
	require.NoError(t, err)
	total, frees := 0, 0
	for _, st := range res.Devices {
		total += st.Instrs
		frees += st.Count[program.Free]
	}
	require.Len(t, res.Trace, total)
	require.Positive(t, frees, "the pipeline frees buffers, so leaving frees out is tested")

	doc := traceOf(t, res, TraceOptions{Stages: [][]int{{0}, {1}}})
	meta := map[[3]any]bool{}
	var slices int
	for _, e := range doc.TraceEvents {
		switch e.Ph {
		case "M":
			if n, ok := e.Args["name"]; ok {
				meta[[3]any{e.Name, e.Pid, n}] = true
			}
			if e.Name == "thread_name" {
				assert.Equal(t, e.Tid, e.Pid, "device d is in stage d here")
			}
		case "X":
			slices++
			assert.Equal(t, e.Tid, e.Pid, "%s: a device's slices are in its stage's process", e.Name)
			assert.NotEqual(t, "free", e.Cat, "frees are left out by default")
		}
	}
	for _, want := range [][3]any{
		{"process_name", 0, "stage 0"}, {"process_name", 1, "stage 1"},
		{"thread_name", 0, "device 0"}, {"thread_name", 1, "device 1"},
	} {
		assert.True(t, meta[want], "metadata event %v", want)
	}
	assert.Equal(t, total-frees, slices)
	names := map[string]bool{}
	for _, e := range doc.TraceEvents {
		names[e.Name] = true
	}
	for _, n := range []string{"load w0", "matmul z0.mb0", "send h1.mb0", "recv h1.mb0", "store h2.mb1"} {
		assert.True(t, names[n], "an event named %q: op or kind, then the value", n)
	}

	all := traceOf(t, res, TraceOptions{Frees: true})
	assert.Len(t, all.TraceEvents, total+1+2*2, "every instruction, one process_name, two metadata events per device")
	assert.Equal(t, "autopar run", all.TraceEvents[0].Args["name"])

	var buf bytes.Buffer
	assert.ErrorContains(t, res.WriteTraceWith(&buf, TraceOptions{Stages: [][]int{{0}}}), "device 1 is in no stage")
}

func TestEventNameMicrobatch(t *testing.T) {
	p := &program.Program{
		Buffers: []program.BufferDecl{{Name: "l0.mlp.w1"}, {Name: "a"}, {Name: "b"}},
		Instrs: []program.Instr{
			{Kind: program.Compute, Op: ir.OpMatMul, Out: 0, Args: []program.BufferID{1, 2}},
			{Kind: program.Free, Out: program.NoBuffer, Args: []program.BufferID{1, 2}},
		},
	}
	assert.Equal(t, "matmul l0.mlp.w1 mb3", EventName(p, 0, 3))
	assert.Equal(t, "matmul l0.mlp.w1", EventName(p, 0, -1))
	assert.Equal(t, "free a +1", EventName(p, 1, -1))
}
