package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
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
	case phaseU:
		return "update"
	}
	return "prologue"
}

// taskAt returns the task of a call of a lowered program's block for micro-batch mb.
func taskAt(block, mb int) task {
	switch block {
	case program.BlockForward:
		return task{phaseF, mb}
	case program.BlockBackward:
		return task{phaseB, mb}
	case program.BlockUpdate:
		return task{phaseU, -1}
	}
	return task{phaseNone, -1} // the prologue: loads, no transfers
}

// taskCursor walks one stage's loops call by call without expanding them.
type taskCursor struct {
	loops      []program.Loop
	l, i, call int
}

func newTaskCursor(loops []program.Loop) *taskCursor {
	c := &taskCursor{loops: loops}
	if len(loops) > 0 {
		c.i = loops[0].From
	}
	c.skipEmpty()
	return c
}

func (c *taskCursor) skipEmpty() {
	for c.l < len(c.loops) && (c.i >= c.loops[c.l].To || len(c.loops[c.l].Body) == 0) {
		c.l++
		c.call = 0
		if c.l < len(c.loops) {
			c.i = c.loops[c.l].From
		}
	}
}

func (c *taskCursor) done() bool { return c.l >= len(c.loops) }

func (c *taskCursor) task() task {
	call := c.loops[c.l].Body[c.call]
	return taskAt(call.Block, c.i+call.Shift)
}

func (c *taskCursor) next() {
	if c.call++; c.call == len(c.loops[c.l].Body) {
		c.call = 0
		c.i++
		c.skipEmpty()
	}
}

// checkDeadlock runs the stages' schedules against each other, a task starting only once
// every task it receives a value from has finished. Sends never block (the runtime's
// contract), so if this completes, the programs do too: each receive waits only for a send
// in a task that finished earlier. It returns an error naming the stuck tasks otherwise
// (a stage assignment whose forward runs backwards through the pipeline, say).
//
// It does not expand the schedules: which stages a task of each phase receives from is
// the same for every micro-batch, and each stage runs its forwards and its backwards in
// micro-batch order, so "has stage t finished its forward of micro-batch k" is a count.
// Memory is O(stages²), time O(stages · micro-batches · stages).
func checkDeadlock(p *Plan, an *analysis, loops [][]program.Loop) error {
	type dep struct {
		s  StageID
		ph phase
	}
	g := p.Step
	S := len(loops)
	deps := make([][4][]dep, S) // per stage, per phase of its task: the tasks it waits on
	add := func(s StageID, ph phase, d dep) {
		if !slices.Contains(deps[s][ph], d) {
			deps[s][ph] = append(deps[s][ph], d)
		}
	}
	for id := range g.Values {
		v := g.Value(ir.ValueID(id))
		s := p.StageOf[id]
		for _, a := range v.Args {
			if av := g.Value(a); av.Op.IsLeaf() || madeWhereUsed(av) || p.StageOf[a] == s {
				continue // loaded, or filled, where it is used
			}
			if ph := an.phase[id]; ph == phaseF || ph == phaseB {
				add(s, ph, dep{p.StageOf[a], an.phase[a]})
			}
			if an.phase[id] == phaseU || an.alsoU[id] {
				add(s, phaseU, dep{p.StageOf[a], phaseU})
			}
		}
	}
	doneCount := make([][4]int, S) // per stage, per phase: tasks finished (the update: 0 or 1)
	finished := func(d dep, mb int) bool {
		if d.ph == phaseU || mb < 0 {
			return doneCount[d.s][phaseU] > 0
		}
		return doneCount[d.s][d.ph] > mb
	}
	cur := make([]*taskCursor, S)
	for s := range cur {
		cur[s] = newTaskCursor(loops[s])
	}
	for progress := true; progress; {
		progress = false
		for s, c := range cur {
			for !c.done() {
				t := c.task()
				ready := true
				for _, d := range deps[s][t.ph] {
					ready = ready && finished(d, t.mb)
				}
				if !ready {
					break
				}
				doneCount[s][t.ph]++
				c.next()
				progress = true
			}
		}
	}
	var stuck []string
	for s, c := range cur {
		if !c.done() {
			stuck = append(stuck, fmt.Sprintf("stage %d at its %s", s, c.task()))
		}
	}
	if len(stuck) > 0 {
		return fmt.Errorf("codegen: the %s schedule deadlocks with this stage assignment: %s wait on each other, expected values to flow forward through the stages and gradients back",
			p.Schedule, strings.Join(stuck, ", "))
	}
	return nil
}
