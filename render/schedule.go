package render

import (
	"fmt"
	"sort"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/program"
)

// BlockKind is what a block of a timeline shows.
type BlockKind uint8

// Forward, Backward and Update blocks are the tasks of a stage; Comm blocks are the
// communication inside them (collectives, send and recv), drawn over the task they belong
// to.
const (
	Forward BlockKind = iota
	Backward
	Update
	Comm
)

func (k BlockKind) String() string {
	switch k {
	case Forward:
		return "forward"
	case Backward:
		return "backward"
	case Update:
		return "update"
	case Comm:
		return "communication"
	}
	return fmt.Sprintf("BlockKind(%d)", uint8(k))
}

// Block is one bar of a timeline.
type Block struct {
	Row        int // index into Schedule.Rows
	Kind       BlockKind
	Microbatch int     // −1 for the update
	Start, End float64 // seconds since the step began
	Note       string  // the tooltip
}

// Row is one device of a timeline.
type Row struct {
	Device int
	Stage  int // −1 for a device no stage uses
}

// Schedule is a pipeline timeline: what each device does when, predicted or measured.
type Schedule struct {
	Title        string
	Microbatches int
	Rows         []Row
	Blocks       []Block
}

// End is the time the last block ends.
func (s *Schedule) End() float64 {
	end := 0.0
	for _, b := range s.Blocks {
		end = max(end, b.End)
	}
	return end
}

// rowsOf lists every device of p's cluster with the stage that runs on it, stage by
// stage so that the pipeline reads top to bottom; devices no stage uses come last.
func rowsOf(p *plan.Plan) []Row {
	n := p.Cluster.Hosts * p.Cluster.DevicesPerHost
	rows := make([]Row, n)
	for d := range rows {
		rows[d] = Row{Device: d, Stage: -1}
	}
	for s, st := range p.Stages {
		for _, d := range st.Devices {
			if d >= 0 && d < n {
				rows[d].Stage = s
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i].Stage, rows[j].Stage
		if a < 0 || b < 0 {
			return b < 0 && a >= 0
		}
		return a < b
	})
	return rows
}

// phase is the part of the training step a value belongs to, as codegen classifies it: the
// loss needs it (forward), a gradient needs it (backward), or neither (the update).
type phase uint8

const (
	phaseNone phase = iota // graph inputs
	phaseF
	phaseB
	phaseU
)

// phases classifies every value of step the way codegen's analysis does (its is
// unexported): forward = ancestors of the loss, backward = the other ancestors of the
// loss and the gradients (ir.RoleGrad, as passes.TrainingStep marks them), update = the rest.
func phases(step *ir.Graph) []phase {
	out := make([]phase, len(step.Values))
	if len(step.Outputs) == 0 {
		return out
	}
	roots := []ir.ValueID{step.Outputs[0].Value}
	fwd := ancestors(step, roots)
	gradOf := step.ByRole(ir.RoleGrad)
	for i := range step.Values {
		if v := &step.Values[i]; v.Op == ir.OpParam {
			if g := gradOf[i]; g != ir.NoValue {
				roots = append(roots, g)
			}
		}
	}
	mb := ancestors(step, roots)
	for i := range step.Values {
		switch {
		case step.Values[i].Op.IsLeaf():
		case fwd[i]:
			out[i] = phaseF
		case mb[i]:
			out[i] = phaseB
		default:
			out[i] = phaseU
		}
	}
	return out
}

func ancestors(g *ir.Graph, roots []ir.ValueID) []bool {
	in := make([]bool, len(g.Values))
	for _, r := range roots {
		in[r] = true
	}
	for i := len(g.Values) - 1; i >= 0; i-- {
		if in[i] {
			for _, a := range g.Values[i].Args {
				in[a] = true
			}
		}
	}
	return in
}

// task is one unit of a stage's schedule: the forward or backward of one micro-batch, or
// the update (mb −1).
type task struct {
	kind BlockKind // Forward, Backward or Update
	mb   int
}

// stageOrder is the order stage i of s runs its tasks in: codegen's own schedule loops
// (program.StageLoops) expanded, the prologue left out (it holds no task's work).
func stageOrder(sched program.Schedule, s, i, b int) []task {
	var out []task
	for _, l := range program.StageLoops(sched, s, i, b) {
		for k := l.From; k < l.To; k++ {
			for _, c := range l.Body {
				if t, ok := blockTask(c.Block, k+c.Shift); ok {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// blockTask is the task a call of a lowered program's block runs for micro-batch mb; the
// prologue is none.
func blockTask(block, mb int) (task, bool) {
	switch block {
	case program.BlockForward:
		return task{Forward, mb}, true
	case program.BlockBackward:
		return task{Backward, mb}, true
	case program.BlockUpdate:
		return task{Update, -1}, true
	}
	return task{}, false
}

// sortBlocks puts blocks in row, then time, then kind order, so the SVG is the same
// whatever order they were found in.
func sortBlocks(bs []Block) {
	sort.SliceStable(bs, func(i, j int) bool {
		a, b := bs[i], bs[j]
		if a.Row != b.Row {
			return a.Row < b.Row
		}
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		return a.Kind < b.Kind
	})
}
