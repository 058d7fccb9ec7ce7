package render

import (
	"fmt"
	"testing"

	"github.com/autopar/autopar/program"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With S equal stages and B micro-batches, both schedules take (B+S−1)(f+b) and then the
// update: the textbook pipeline with its (S−1)(f+b) bubble.
func TestSimulateUniformStages(t *testing.T) {
	for _, sched := range []program.Schedule{program.GPipe, program.OneFOneB} {
		for _, sb := range [][2]int{{1, 1}, {1, 4}, {2, 4}, {4, 4}, {4, 8}, {3, 2}} {
			S, B := sb[0], sb[1]
			t.Run(fmt.Sprintf("%s/S%d/B%d", sched, S, B), func(t *testing.T) {
				times := make([]stageTimes, S)
				for s := range times {
					times[s] = stageTimes{fwd: 1, bwd: 2, update: 0.5}
				}
				spans := simulate(sched, S, B, times)
				end := 0.0
				for _, ss := range spans {
					end = max(end, ss[len(ss)-1].end)
				}
				assert.InDelta(t, float64(B+S-1)*3+0.5, end, 1e-9)
			})
		}
	}
}

// Every simulated task starts after its stage's previous task and after the task it
// receives from, on unequal stages too.
func TestSimulateRespectsDependencies(t *testing.T) {
	times := []stageTimes{{fwd: 1, bwd: 2}, {fwd: 3, bwd: 6, update: 1}, {fwd: 0.5, bwd: 1}}
	for _, sched := range []program.Schedule{program.GPipe, program.OneFOneB} {
		spans := simulate(sched, len(times), 5, times)
		ends := map[[3]int]float64{}
		for s, ss := range spans {
			require.Len(t, ss, 2*5+1)
			for _, sp := range ss {
				ends[[3]int{s, int(sp.t.kind), sp.t.mb}] = sp.end
			}
		}
		for s, ss := range spans {
			for i, sp := range ss {
				if i > 0 {
					assert.GreaterOrEqual(t, sp.start, ss[i-1].end)
				}
				switch {
				case sp.t.kind == Forward && s > 0:
					assert.GreaterOrEqual(t, sp.start, ends[[3]int{s - 1, int(Forward), sp.t.mb}])
				case sp.t.kind == Backward && s < len(times)-1:
					assert.GreaterOrEqual(t, sp.start, ends[[3]int{s + 1, int(Backward), sp.t.mb}])
				}
			}
		}
	}
}

// Predict splits each stage's time as documented: forward:backward 1:2 of the time less
// the update, which runs once.
func TestPredictSplitsStageTime(t *testing.T) {
	p := compilePlan(t, planCases[1])
	s, err := Predict(p)
	require.NoError(t, err)
	ph := phases(p.Step())
	for r, row := range s.Rows {
		st := timesOf(p, row.Stage, ph)
		assert.InDelta(t, p.Stages[row.Stage].Time, st.fwd+st.bwd+st.update, 1e-15)
		var n [3]int
		for _, b := range s.Blocks {
			if b.Row != r || b.Kind == Comm {
				continue
			}
			n[b.Kind]++
			want := map[BlockKind]float64{Forward: st.fwd, Backward: st.bwd, Update: st.update}[b.Kind]
			assert.InDelta(t, want, b.End-b.Start, 1e-12, b.Note)
		}
		assert.Equal(t, [3]int{p.Microbatches, p.Microbatches, 1}, n, "device %d", row.Device)
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{deviceRange([]int{0, 1, 2, 3}), "0-3"},
		{deviceRange([]int{2}), "2"},
		{deviceRange([]int{0, 2, 5}), "0,2,5"},
		{deviceRange(nil), "none"},
		{hsl(0, 1, 0.5), "#ff0000"},
		{hsl(240, 1, 0.5), "#0000ff"},
		{num(1.005), "1"},
		{num(-0.001), "0"},
		{num(12.5), "12.5"},
		{plural(1, "op"), "1 op"},
		{plural(2, "op"), "2 ops"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.got)
	}
	for _, tc := range []struct{ raw, want float64 }{{0.13, 0.2}, {3, 5}, {7e-6, 1e-5}, {1, 1}, {0, 1}} {
		assert.InDelta(t, tc.want, niceStep(tc.raw), tc.want*1e-9)
	}
}
