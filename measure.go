package autopar

import (
	"errors"
	"sort"
	"time"

	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
)

// StageTimes are one pipeline stage's seconds in one training step on the runtime, the
// mean over the stage's devices of what their instructions took: Compute (compute,
// constant and accumulate instructions), Communication (collectives, sends and receives,
// waiting for peers included in wall time) and Other (loads, stores, frees).
type StageTimes struct {
	Compute       float64
	Communication float64
	Other         float64
}

// Total is the stage's busy time, Compute + Communication + Other.
func (s StageTimes) Total() float64 { return s.Compute + s.Communication + s.Other }

// MeasuredStep is one step as the runtime ran it.
//
// In wall-clock time: Step is the longest device's time (the step's wall time on the
// runtime, without the serial check or the host's feeding), Stages the per-stage split, in
// the plan's stage order. On a shared machine both include whatever else ran.
//
// In CPU time, when the step was run with the devices' CPU time measured
// (TrainerOptions.CPUTime; zero otherwise): CPUStep is the step with one core per device
// and nothing else on the machine, each instruction taking the CPU time its device's
// thread spent on it, replayed along the programs' dependencies (runtime.CPUStep); this is
// what a prediction on a cluster from autopar calibrate describes. CPUStages splits each
// stage's CPU time as Stages does (communication then holds no waiting).
type MeasuredStep struct {
	Step      float64
	Stages    []StageTimes
	CPUStep   float64
	CPUStages []StageTimes
}

// Measure reads a step's wall-clock times, and its CPU-time split per stage when the
// runtime measured one, from the runtime's per-device counters. Devices the plan does not
// name are left out. CPUStep needs the programs: see MeasureCPU and Trainer.Measured.
func Measure(p *Plan, r *runtime.Result) MeasuredStep {
	m := MeasuredStep{}
	m.Step, m.Stages = stageTimes(p, r, func(d *runtime.DeviceStats, k int) time.Duration { return d.Time[k] })
	if len(r.Devices) > 0 && r.Devices[0].CPUSpans != nil {
		_, m.CPUStages = stageTimes(p, r, func(d *runtime.DeviceStats, k int) time.Duration { return d.CPU[k] })
	}
	return m
}

// MeasureCPU is Measure with CPUStep replayed from the programs the run ran; r must come
// from a run with runtime.Options.CPUTime.
func MeasureCPU(p *Plan, progs []*program.Program, r *runtime.Result) (MeasuredStep, error) {
	m := Measure(p, r)
	if m.CPUStages == nil {
		return m, errors.New("measure: the run did not measure CPU time (runtime.Options.CPUTime)")
	}
	_, step, err := runtime.CPUStep(progs, r.Devices)
	m.CPUStep = step.Seconds()
	return m, err
}

// Measured is MeasureCPU (with TrainerOptions.CPUTime) or Measure of the last step.
func (t *Trainer) Measured() (MeasuredStep, error) {
	if t.last == nil {
		return MeasuredStep{}, errors.New("measure: no step has run")
	}
	if !t.opts.CPUTime {
		return Measure(t.plan, t.last), nil
	}
	return MeasureCPU(t.plan, t.progs, t.last)
}

// stageTimes is the busiest device's total and the per-stage means of the times
// read takes from each device's counters, per instruction kind.
func stageTimes(p *Plan, r *runtime.Result, read func(d *runtime.DeviceStats, kind int) time.Duration) (float64, []StageTimes) {
	stageOf := map[int]int{}
	for i, s := range p.Stages {
		for _, d := range s.Devices {
			stageOf[d] = i
		}
	}
	stages := make([]StageTimes, len(p.Stages))
	count := make([]int, len(p.Stages))
	busiest := 0.0
	for i := range r.Devices {
		d := &r.Devices[i]
		var t StageTimes
		for k := range program.NumKinds {
			sec := read(d, k).Seconds()
			switch program.Kind(k) {
			case program.Compute, program.Constant, program.Accumulate:
				t.Compute += sec
			case program.AllReduce, program.AllGather, program.ReduceScatter, program.AllToAll, program.Send, program.Recv:
				t.Communication += sec
			default:
				t.Other += sec
			}
		}
		busiest = max(busiest, t.Total())
		s, ok := stageOf[int(d.Device)]
		if !ok {
			continue
		}
		stages[s].Compute += t.Compute
		stages[s].Communication += t.Communication
		stages[s].Other += t.Other
		count[s]++
	}
	for i := range stages {
		if count[i] > 0 {
			n := float64(count[i])
			stages[i] = StageTimes{stages[i].Compute / n, stages[i].Communication / n, stages[i].Other / n}
		}
	}
	return busiest, stages
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

// MedianCPUStep is the step of median CPUStep among steps (the lower middle one for an
// even count); the zero MeasuredStep for none.
func MedianCPUStep(steps []MeasuredStep) MeasuredStep {
	if len(steps) == 0 {
		return MeasuredStep{}
	}
	s := append([]MeasuredStep(nil), steps...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].CPUStep < s[j].CPUStep })
	return s[(len(s)-1)/2]
}
