package codegen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/autopar/autopar/program"
)

// stageTasks expands stage i's loops into its tasks (the prologue left out).
func stageTasks(sched program.Schedule, s, i, b int) []task {
	var out []task
	for c := newTaskCursor(program.StageLoops(sched, s, i, b)); !c.done(); c.next() {
		if t := c.task(); t.ph != phaseNone {
			out = append(out, t)
		}
	}
	return out
}

func TestStageTasks(t *testing.T) {
	short := func(ts []task) string {
		var parts []string
		for _, x := range ts {
			switch x.ph {
			case phaseF:
				parts = append(parts, fmt.Sprintf("F%d", x.mb))
			case phaseB:
				parts = append(parts, fmt.Sprintf("B%d", x.mb))
			default:
				parts = append(parts, "U")
			}
		}
		return strings.Join(parts, " ")
	}
	cases := []struct {
		sched   program.Schedule
		s, i, b int
		want    string
	}{
		{program.GPipe, 2, 0, 3, "F0 F1 F2 B0 B1 B2 U"},
		{program.GPipe, 1, 0, 1, "F0 B0 U"},
		{program.OneFOneB, 4, 0, 6, "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 U"},
		{program.OneFOneB, 4, 2, 6, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 U"},
		{program.OneFOneB, 4, 3, 6, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 U"},
		{program.OneFOneB, 4, 0, 2, "F0 F1 B0 B1 U"}, // fewer micro-batches than warm-up slots
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%d-%d-%d", c.sched, c.s, c.i, c.b), func(t *testing.T) {
			assert.Equal(t, c.want, short(stageTasks(c.sched, c.s, c.i, c.b)))
		})
	}
}
