package render

import (
	"bytes"
	"io"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReadTrace holds the trace reader (autopar render --timeline --trace FILE) to its
// contract on any bytes: an error, or a schedule whose blocks are finite, start at or after
// zero and end at or after they start, and that draws as a timeline. The plan is the
// pipelined MLP of planCases[1], lowered once; run it with
//
//	go test ./render -run '^$' -fuzz '^FuzzReadTrace$' -fuzztime 10m
func FuzzReadTrace(f *testing.F) {
	p := compilePlan(f, planCases[1])
	progs, err := p.Programs()
	require.NoError(f, err)
	good := syntheticTrace(f, p)
	f.Add(good)
	f.Add(good[:len(good)/2])
	for _, s := range []string{"", "{", "null", `{"traceEvents":[]}`, `{"traceEvents":null}`, `[]`,
		`{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":0}}]}`,
		`{"traceEvents":[{"name":"load","cat":"load","ph":"X","ts":1e308,"dur":1e308,"tid":0,"args":{"instr":0}}]}`,
		`{"traceEvents":[{"name":"load","ph":"X","ts":-1e308,"dur":0,"tid":0,"args":{"instr":0}},` +
			`{"name":"load","ph":"X","ts":1e308,"dur":0,"tid":1,"args":{"instr":0}}]}`,
		`{"traceEvents":[{"name":"load","ph":"X","ts":0,"dur":1,"tid":0,"args":{"instr":-1}}]}`,
		`{"traceEvents":[{"name":"load","ph":"B","ts":0,"tid":0}]} {}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := decodeTrace(bytes.NewReader(data))
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		s, err := traceSchedule(evs, p, progs)
		if err != nil {
			require.Nil(t, s)
			require.NotEmpty(t, err.Error())
			return
		}
		for _, b := range s.Blocks {
			require.False(t, math.IsNaN(b.Start) || math.IsInf(b.Start, 0) || math.IsNaN(b.End) || math.IsInf(b.End, 0), b.Note)
			require.GreaterOrEqual(t, b.Start, 0.0, b.Note)
			require.LessOrEqual(t, b.Start, b.End, b.Note)
		}
		require.NoError(t, Timeline(io.Discard, s))
	})
}
