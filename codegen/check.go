package codegen

import (
	"fmt"

	"github.com/autopar/autopar/program"
)

// Check runs the checks Lower runs before it emits anything: the plan's shape, every
// strategy (CheckStrategy), and that the schedule does not deadlock with the stage
// assignment. It lets a reader of a saved plan refuse one Lower would refuse, without
// lowering it.
func Check(p *Plan) error {
	_, _, err := check(p)
	return err
}

// check is Check, returning what Lower goes on with: the plan's analysis and each stage's
// schedule.
func check(p *Plan) (*analysis, [][]program.Loop, error) {
	an, err := checkPlan(p)
	if err != nil {
		return nil, nil, err
	}
	if p.Microbatches > program.MaxMicrobatches {
		return nil, nil, fmt.Errorf("codegen: %d micro-batches, expected at most %d", p.Microbatches, program.MaxMicrobatches)
	}
	loops := make([][]program.Loop, len(p.Stages))
	for i := range p.Stages {
		loops[i] = program.StageLoops(p.Schedule, len(p.Stages), i, p.Microbatches)
	}
	if err := checkDeadlock(p, an, loops); err != nil {
		return nil, nil, err
	}
	return an, loops, nil
}
