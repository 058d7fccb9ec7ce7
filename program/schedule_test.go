package program

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// task is a call of a block for a micro-batch.
type task struct{ block, mb int }

// stageTasks expands stage i's loops into its tasks (the prologue left out).
func stageTasks(sched Schedule, s, i, b int) []task {
	var out []task
	for _, l := range StageLoops(sched, s, i, b) {
		for k := l.From; k < l.To; k++ {
			for _, c := range l.Body {
				if c.Block != BlockPrologue {
					out = append(out, task{c.Block, k + c.Shift})
				}
			}
		}
	}
	return out
}

func TestStageTasks(t *testing.T) {
	short := func(ts []task) string {
		var parts []string
		for _, x := range ts {
			switch x.block {
			case BlockForward:
				parts = append(parts, fmt.Sprintf("F%d", x.mb))
			case BlockBackward:
				parts = append(parts, fmt.Sprintf("B%d", x.mb))
			default:
				parts = append(parts, "U")
			}
		}
		return strings.Join(parts, " ")
	}
	cases := []struct {
		sched   Schedule
		s, i, b int
		want    string
	}{
		{GPipe, 2, 0, 3, "F0 F1 F2 B0 B1 B2 U"},
		{GPipe, 1, 0, 1, "F0 B0 U"},
		{OneFOneB, 4, 0, 6, "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 U"},
		{OneFOneB, 4, 2, 6, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5 U"},
		{OneFOneB, 4, 3, 6, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 U"},
		{OneFOneB, 4, 0, 2, "F0 F1 B0 B1 U"}, // fewer micro-batches than warm-up slots
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%d-%d-%d", c.sched, c.s, c.i, c.b), func(t *testing.T) {
			assert.Equal(t, c.want, short(stageTasks(c.sched, c.s, c.i, c.b)))
		})
	}
}

func TestParseSchedule(t *testing.T) {
	for _, s := range []Schedule{GPipe, OneFOneB} {
		got, err := ParseSchedule(s.String())
		assert.NoError(t, err)
		assert.Equal(t, s, got)
	}
	_, err := ParseSchedule("zigzag")
	assert.ErrorContains(t, err, `unknown schedule "zigzag"`)
}

func TestScheduleZeroIs1F1B(t *testing.T) {
	var s Schedule
	assert.Equal(t, OneFOneB, s, "the zero value is the CLI's default, 1f1b")
	assert.Equal(t, "1f1b", s.String())
}
