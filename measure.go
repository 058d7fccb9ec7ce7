package autopar

import (
	"sort"

	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
)

// StageTimes are one pipeline stage's seconds in one training step on the runtime, the
// mean over the stage's devices of what their instructions took: Compute (compute,
// constant and accumulate instructions), Communication (collectives, sends and receives,
// waiting for peers included) and Other (loads, stores, frees).
type StageTimes struct {
	Compute       float64
	Communication float64
	Other         float64
}

// Total is the stage's busy time, Compute + Communication + Other.
func (s StageTimes) Total() float64 { return s.Compute + s.Communication + s.Other }

// MeasuredStep is one step as the runtime ran it: Step is the longest device's time (the
// step's wall time on the runtime, without the serial check or the host's feeding), Stages
// the per-stage split, in the plan's stage order.
type MeasuredStep struct {
	Step   float64
	Stages []StageTimes
}

// Measure reads a step's times from the runtime's per-device counters. Devices the plan
// does not name are left out.
func Measure(p *Plan, r *runtime.Result) MeasuredStep {
	stageOf := map[int]int{}
	for i, s := range p.Stages {
		for _, d := range s.Devices {
			stageOf[d] = i
		}
	}
	m := MeasuredStep{Stages: make([]StageTimes, len(p.Stages))}
	count := make([]int, len(p.Stages))
	for _, d := range r.Devices {
		var t StageTimes
		for k, dt := range d.Time {
			sec := dt.Seconds()
			switch program.Kind(k) {
			case program.Compute, program.Constant, program.Accumulate:
				t.Compute += sec
			case program.AllReduce, program.AllGather, program.ReduceScatter, program.AllToAll, program.Send, program.Recv:
				t.Communication += sec
			default:
				t.Other += sec
			}
		}
		m.Step = max(m.Step, t.Total())
		s, ok := stageOf[int(d.Device)]
		if !ok {
			continue
		}
		m.Stages[s].Compute += t.Compute
		m.Stages[s].Communication += t.Communication
		m.Stages[s].Other += t.Other
		count[s]++
	}
	for i := range m.Stages {
		if count[i] > 0 {
			n := float64(count[i])
			m.Stages[i] = StageTimes{m.Stages[i].Compute / n, m.Stages[i].Communication / n, m.Stages[i].Other / n}
		}
	}
	return m
}

// MedianStep is the step of median Step among steps (the lower middle one for an even
// count); the zero MeasuredStep for none.
func MedianStep(steps []MeasuredStep) MeasuredStep {
	if len(steps) == 0 {
		return MeasuredStep{}
	}
	s := append([]MeasuredStep(nil), steps...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Step < s[j].Step })
	return s[(len(s)-1)/2]
}
