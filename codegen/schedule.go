package codegen

import (
	"fmt"
	"strings"

	"github.com/autopar/autopar/ir"
)

// task is one unit of a stage's program: the forward or backward half of one
// micro-batch, or the update (mb −1).
type task struct {
	ph phase
	mb int
}

func (t task) String() string {
	switch t.ph {
	case phaseF:
		return fmt.Sprintf("forward of micro-batch %d", t.mb)
	case phaseB:
		return fmt.Sprintf("backward of micro-batch %d", t.mb)
	}
	return "update"
}

// stageTasks returns the order stage i of s runs its tasks in under sched with b
// micro-batches. Both orders end with the update, once.
//
// GPipe: F0 … F(b−1), B0 … B(b−1). 1F1B (PipeDream-flush): w = min(s−1−i, b) warm-up
// forwards, then F(w+k) (while any is left) and B(k) for k = 0 … b−1, so stage i holds
// at most s−i micro-batches' activations, as the stage DP assumes.
func stageTasks(sched Schedule, s, i, b int) []task {
	var out []task
	switch sched {
	case GPipe:
		for k := range b {
			out = append(out, task{phaseF, k})
		}
		for k := range b {
			out = append(out, task{phaseB, k})
		}
	case OneFOneB:
		w := min(s-1-i, b)
		for k := range w {
			out = append(out, task{phaseF, k})
		}
		for k := range b {
			if w+k < b {
				out = append(out, task{phaseF, w + k})
			}
			out = append(out, task{phaseB, k})
		}
	default:
		panic(fmt.Sprintf("codegen: schedule %d has no order", int(sched)))
	}
	return append(out, task{phaseU, -1})
}

// taskOf returns the task that produces value v for micro-batch mb (−1: the update).
func taskOf(an *analysis, v ir.ValueID, mb int) task {
	if mb < 0 {
		return task{phaseU, -1}
	}
	return task{an.phase[v], mb}
}

// checkDeadlock runs the stages' task orders against each other, a task starting only
// once every task it receives a value from has finished. Sends never block (the runtime's
// contract), so if this completes, the programs do too: each receive waits only for a send
// in a task that finished earlier. It returns an error naming the stuck tasks otherwise
// (a stage assignment whose forward runs backwards through the pipeline, say).
func checkDeadlock(p *Plan, an *analysis, orders [][]task) error {
	type stageTask struct {
		s StageID
		t task
	}
	g := p.Step
	deps := map[stageTask][]stageTask{}
	for id := range g.Values {
		v := g.Value(ir.ValueID(id))
		s := p.StageOf[id]
		for _, a := range v.Args {
			if av := g.Value(a); av.Op.IsLeaf() || madeWhereUsed(av) || p.StageOf[a] == s {
				continue // loaded, or filled, where it is used
			}
			if an.phase[id] == phaseF || an.phase[id] == phaseB {
				for k := range p.Microbatches {
					me := stageTask{s, task{an.phase[id], k}}
					deps[me] = append(deps[me], stageTask{p.StageOf[a], taskOf(an, a, k)})
				}
			}
			if an.phase[id] == phaseU || an.alsoU[id] {
				me := stageTask{s, task{phaseU, -1}}
				deps[me] = append(deps[me], stageTask{p.StageOf[a], task{phaseU, -1}})
			}
		}
	}
	done := map[stageTask]bool{}
	pos := make([]int, len(orders))
	for progress := true; progress; {
		progress = false
		for s, order := range orders {
			for pos[s] < len(order) {
				me := stageTask{StageID(s), order[pos[s]]}
				ready := true
				for _, d := range deps[me] {
					ready = ready && (done[d] || d == me)
				}
				if !ready {
					break
				}
				done[me] = true
				pos[s]++
				progress = true
			}
		}
	}
	var stuck []string
	for s, order := range orders {
		if pos[s] < len(order) {
			stuck = append(stuck, fmt.Sprintf("stage %d at its %s", s, order[pos[s]]))
		}
	}
	if len(stuck) > 0 {
		return fmt.Errorf("codegen: the %s schedule deadlocks with this stage assignment: %s wait on each other, expected values to flow forward through the stages and gradients back",
			p.Schedule, strings.Join(stuck, ", "))
	}
	return nil
}
