package program

import "fmt"

// Schedule is the order in which a stage runs the forward and backward halves of its
// micro-batches. It is the one pipeline-schedule enum of autopar: codegen lowers to it,
// dp sizes stages by it and plan.json names it (String / ParseSchedule).
//
// The zero value is OneFOneB, the CLI's default and the schedule to use.
type Schedule int

// The schedules.
const (
	// OneFOneB is PipeDream-flush: stage i of S warms up with S−1−i forwards, then
	// alternates one forward and one backward, then drains the backwards. It holds at most
	// S−i micro-batches' activations. It is the zero value.
	OneFOneB Schedule = iota
	// GPipe runs every forward, then every backward: simple, and it holds the activations
	// of all B micro-batches at once.
	GPipe
)

func (s Schedule) String() string {
	switch s {
	case GPipe:
		return "gpipe"
	case OneFOneB:
		return "1f1b"
	}
	return fmt.Sprintf("schedule(%d)", int(s))
}

// ParseSchedule reads the name String writes.
func ParseSchedule(name string) (Schedule, error) {
	switch name {
	case "gpipe":
		return GPipe, nil
	case "1f1b":
		return OneFOneB, nil
	}
	return 0, fmt.Errorf("program: unknown schedule %q, expected gpipe or 1f1b", name)
}

// The blocks of every lowered program, by index in Program.Blocks: what a schedule's
// calls (StageLoops) and a trace's instructions (Program.BlockOf) refer to.
const (
	BlockPrologue = iota
	BlockForward
	BlockBackward
	BlockUpdate
)

// StageLoops returns the schedule of stage i of s under sched with b micro-batches, over
// the blocks Lower emits: the prologue, the micro-batches' forwards and backwards in
// loops, and the update, once.
//
// GPipe: F0 … F(b−1), B0 … B(b−1). 1F1B (PipeDream-flush): w = min(s−1−i, b) warm-up
// forwards, then F(w+k) (while any is left) and B(k) for k = 0 … b−1, so stage i holds
// at most s−i micro-batches' activations, as the stage DP assumes: three loops, warm-up,
// steady (F(k+w), B(k)) and cool-down.
func StageLoops(sched Schedule, s, i, b int) []Loop {
	once := func(block int) Loop { return Loop{From: 0, To: 1, Body: []Call{{Block: block}}} }
	out := []Loop{once(BlockPrologue)}
	add := func(from, to int, body ...Call) {
		if from < to {
			out = append(out, Loop{From: from, To: to, Body: body})
		}
	}
	switch sched {
	case GPipe:
		add(0, b, Call{Block: BlockForward})
		add(0, b, Call{Block: BlockBackward})
	case OneFOneB:
		w := max(0, min(s-1-i, b))
		add(0, w, Call{Block: BlockForward})
		add(0, b-w, Call{Block: BlockForward, Shift: w}, Call{Block: BlockBackward})
		add(b-w, b, Call{Block: BlockBackward})
	default:
		panic(fmt.Sprintf("program: schedule %d has no order", int(sched)))
	}
	return append(out, once(BlockUpdate))
}
