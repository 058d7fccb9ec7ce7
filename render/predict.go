package render

import (
	"fmt"

	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/units"
)

// stageTimes is what Predict reads off one stage of a plan.
type stageTimes struct {
	fwd, bwd float64 // one micro-batch
	update   float64 // once per step
	comm     float64 // fraction of fwd and bwd spent communicating
}

// timesOf splits stage s's predicted time. The plan prices a stage as one number per
// micro-batch (Stage.Time, the sharding ILP's objective over the stage's forward, backward
// and update ops). The update runs once per step, so its ops' own costs (compute +
// communication of the values codegen files under the update) come out of that number and
// go into one update block; the rest is split forward:backward = 1:2, the usual estimate
// (a backward computes two matmuls per forward one: the gradients of the input and of the
// weight). The communication share of each block is the stage's (communication +
// resharding) / total cost.
func timesOf(p *plan.Plan, s int, ph []phase) stageTimes {
	st := &p.Stages[s]
	var t stageTimes
	for _, v := range st.Values {
		if id, ok := p.Step().Lookup(v.Name); ok && ph[id] == phaseU {
			t.update += v.Compute + v.Comm
		}
	}
	t.update = min(t.update, st.Time)
	mb := st.Time - t.update
	t.fwd, t.bwd = mb/3, 2*mb/3
	if st.Cost.Total > 0 {
		t.comm = min(1, (st.Cost.Communication+st.Cost.Resharding)/st.Cost.Total)
	}
	return t
}

// Predict simulates plan p's pipeline schedule from its predicted stage times (see
// timesOf for how a stage's time is split): a stage's forward of micro-batch k starts
// when its own previous task has ended and the previous stage's forward of k has ended;
// its backward of k likewise waits for the next stage's backward of k. Every device of a
// stage gets the stage's blocks. The gaps are the pipeline bubbles.
//
// p must come from autopar.Compile or plan.ReadPlan.
func Predict(p *plan.Plan) (*Schedule, error) {
	if p == nil || p.Step() == nil {
		return nil, errNoStep
	}
	sched, err := program.ParseSchedule(p.Schedule)
	if err != nil {
		return nil, fmt.Errorf("render: plan: %w", err)
	}
	S, B := len(p.Stages), p.Microbatches
	ph := phases(p.Step())
	times := make([]stageTimes, S)
	for s := range times {
		times[s] = timesOf(p, s, ph)
	}
	spans := simulate(sched, S, B, times)
	out := &Schedule{Microbatches: B, Rows: rowsOf(p)}
	for r, row := range out.Rows {
		if row.Stage < 0 {
			continue
		}
		for _, sp := range spans[row.Stage] {
			out.Blocks = append(out.Blocks, predictedBlocks(r, row.Stage, sp, times[row.Stage])...)
		}
	}
	sortBlocks(out.Blocks)
	out.Title = fmt.Sprintf("%s on %s, %s schedule, %d micro-batches: simulated step %s from the plan's stage times; the plan predicted %s",
		p.Model, p.Cluster.Name, p.Schedule, B, units.Seconds(out.End()), units.Seconds(p.Predicted.StepTime))
	return out, nil
}

// span is one task of one stage placed in time.
type span struct {
	t          task
	start, end float64
}

// simulate runs the stages' task orders against each other: a task starts once its
// stage's previous task and the task it receives from have ended. It panics if the orders
// deadlock, which stageOrder's orders never do.
func simulate(sched program.Schedule, S, B int, times []stageTimes) [][]span {
	orders := make([][]task, S)
	for s := range orders {
		orders[s] = stageOrder(sched, S, s, B)
	}
	done := make([][2][]float64, S) // end of [forward, backward][mb], −1 while pending
	for s := range done {
		for k := range done[s] {
			done[s][k] = make([]float64, B)
			for m := range done[s][k] {
				done[s][k][m] = -1
			}
		}
	}
	spans := make([][]span, S)
	free := make([]float64, S) // when each stage's previous task ended
	next := make([]int, S)
	for left := S; left > 0; {
		progress := false
		for s := range S {
			for next[s] < len(orders[s]) {
				t := orders[s][next[s]]
				ready, ok := readyAt(t, s, S, done)
				if !ok {
					break
				}
				start := max(free[s], ready)
				end := start + durationOf(t, times[s])
				spans[s] = append(spans[s], span{t, start, end})
				if t.kind != Update {
					done[s][t.kind][t.mb] = end
				}
				free[s] = end
				next[s]++
				progress = true
				if next[s] == len(orders[s]) {
					left--
				}
			}
		}
		if !progress {
			panic("render: the pipeline schedule deadlocks")
		}
	}
	return spans
}

// readyAt is when the input of task t of stage s arrives, and false while it has not
// been computed.
func readyAt(t task, s, S int, done [][2][]float64) (float64, bool) {
	var dep float64 = 0
	switch {
	case t.kind == Forward && s > 0:
		dep = done[s-1][Forward][t.mb]
	case t.kind == Backward && s < S-1:
		dep = done[s+1][Backward][t.mb]
	case t.kind == Backward:
		dep = done[s][Forward][t.mb]
	}
	return dep, dep >= 0
}

func durationOf(t task, st stageTimes) float64 {
	switch t.kind {
	case Forward:
		return st.fwd
	case Backward:
		return st.bwd
	}
	return st.update
}

// predictedBlocks draws one task on one device: the task, and its communication share as
// a block over its end.
func predictedBlocks(row, stage int, sp span, st stageTimes) []Block {
	b := Block{Row: row, Kind: sp.t.kind, Microbatch: sp.t.mb, Start: sp.start, End: sp.end,
		Note: fmt.Sprintf("stage %d %s, %s", stage, taskName(sp.t), units.Seconds(sp.end-sp.start))}
	out := []Block{b}
	if sp.t.kind != Update && st.comm > 0 {
		c := sp.end - (sp.end-sp.start)*st.comm
		out = append(out, Block{Row: row, Kind: Comm, Microbatch: sp.t.mb, Start: c, End: sp.end,
			Note: fmt.Sprintf("stage %d communication in %s, %s", stage, taskName(sp.t), units.Seconds(sp.end-c))})
	}
	return out
}

func taskName(t task) string {
	if t.kind == Update {
		return "update"
	}
	return fmt.Sprintf("%s of micro-batch %d", t.kind, t.mb)
}
