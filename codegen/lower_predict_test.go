package codegen

import (
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/program"
)

// naiveCounters walks every executed instruction, as the runtime does.
func naiveCounters(p *program.Program) DeviceCounters {
	c := DeviceCounters{Device: p.Device}
	var live int64
	for pc := range p.Execution {
		in := &p.Instrs[pc]
		sent, recv := traffic(p, in)
		c.BytesSent += sent
		c.BytesReceived += recv
		switch {
		case in.Kind == program.Free:
			for _, b := range in.Args {
				live -= p.Buffers[b].Type.Bytes()
			}
		case in.Out != program.NoBuffer && in.Kind != program.AllReduce:
			live += p.Buffers[in.Out].Type.Bytes()
			c.PeakBytes = max(c.PeakBytes, live)
		}
	}
	return c
}

// randomSchedule gives p a 1F1B or GPipe schedule over its four blocks (prologue,
// forward, backward, update) with loops cut at random points, then perhaps one field
// broken, as program's TestScheduleShortcutsAgreeWithExpansion does.
func randomSchedule(rng *rand.Rand, p *program.Program) {
	p.Microbatches = 1 + rng.Intn(6)
	B := p.Microbatches
	// A 1F1B schedule with w warm-up forwards, or GPipe, its loops cut at random
	// points, then perhaps one field broken.
	w := rng.Intn(B + 1)
	loops := []program.Loop{{From: 0, To: w, Body: []program.Call{{Block: 1}}},
		{From: 0, To: B - w, Body: []program.Call{{Block: 1, Shift: w}, {Block: 2}}},
		{From: B - w, To: B, Body: []program.Call{{Block: 2}}}}
	if rng.Intn(3) == 0 {
		loops = []program.Loop{{From: 0, To: B, Body: []program.Call{{Block: 1}}}, {From: 0, To: B, Body: []program.Call{{Block: 2}}}}
	}
	p.Schedule = []program.Loop{{From: 0, To: 1, Body: []program.Call{{Block: 0}}}}
	for _, l := range loops {
		if cut := l.From + rng.Intn(l.To-l.From+1); cut > l.From && cut < l.To {
			p.Schedule = append(p.Schedule, program.Loop{From: l.From, To: cut, Body: l.Body}, program.Loop{From: cut, To: l.To, Body: l.Body})
		} else if l.To > l.From {
			p.Schedule = append(p.Schedule, l)
		}
	}
	p.Schedule = append(p.Schedule, program.Loop{From: 0, To: 1, Body: []program.Call{{Block: 3}}})
	if rng.Intn(2) == 0 {
		l := &p.Schedule[rng.Intn(len(p.Schedule))]
		l.Body = slices.Clone(l.Body)
		c := &l.Body[rng.Intn(len(l.Body))]
		switch rng.Intn(5) {
		case 0:
			l.From += rng.Intn(3) - 1
		case 1:
			l.To += rng.Intn(3) - 1
		case 2:
			c.Shift += rng.Intn(3) - 1
		case 3:
			c.Block = rng.Intn(4)
		case 4:
			l.Body = append(l.Body, *c)
		}
	}
}

// loopProgram is program's loop-form golden: three micro-batches in 1F1B order.
func loopProgram(t *testing.T) (*program.Program, []byte) {
	data, err := os.ReadFile(filepath.Join("..", "program", "testdata", "program_loop.json.golden"))
	require.NoError(t, err)
	p, err := program.UnmarshalProgram(data)
	require.NoError(t, err)
	return p, data
}

func TestPredictLoopProgram(t *testing.T) {
	p, _ := loopProgram(t)
	// Predict follows the calls: at most two micro-batches' x and one h or d.h and g live.
	c := Predict(nil, []*program.Program{p})[0]
	require.Equal(t, int64(3*(4*16*4)+3*(4*16*4)), c.BytesSent+c.BytesReceived)
	require.Equal(t, int64(2*8*16*4+2*4*8*4+4*16*4+8*16*4), c.PeakBytes)
}

// Predict's shortcut over a loop's iterations agrees with expanding it: on the random
// schedules of the loop program (program's golden) that Validate accepts, Predict equals
// the walk of every instruction.
func TestPredictAgreesWithExpansion(t *testing.T) {
	_, data := loopProgram(t)
	rng := rand.New(rand.NewSource(1))
	accepted := 0
	for range 3000 {
		p, err := program.UnmarshalProgram(data)
		require.NoError(t, err)
		randomSchedule(rng, p)
		if p.Validate() != nil {
			continue
		}
		accepted++
		require.Equal(t, naiveCounters(p), Predict(nil, []*program.Program{p})[0], p.String())
	}
	require.Greater(t, accepted, 1000, "too few random schedules are valid to test Predict")
}
