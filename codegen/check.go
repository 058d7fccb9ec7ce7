package codegen

// Check runs the checks Lower runs before it emits anything: the plan's shape, every
// strategy (CheckStrategy), and that the schedule does not deadlock with the stage
// assignment. It lets a reader of a saved plan refuse one Lower would refuse, without
// lowering it.
func Check(p *Plan) error {
	an, err := checkPlan(p)
	if err != nil {
		return err
	}
	orders := make([][]task, len(p.Stages))
	for i := range p.Stages {
		orders[i] = stageTasks(p.Schedule, len(p.Stages), i, p.Microbatches)
	}
	return checkDeadlock(p, an, orders)
}
