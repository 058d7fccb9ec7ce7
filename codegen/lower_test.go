package codegen_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/internal/golden"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
)

// microStep is the micro-batch training step of a small f64 MLP.
func microStep(t testing.TB, layers, b int, opt passes.Optimizer) *ir.Graph {
	fwd := mlp(layers)(t)
	batch, err := passes.BatchSize(fwd)
	require.NoError(t, err)
	mb, err := passes.Rebatch(fwd, batch/b)
	require.NoError(t, err)
	step, err := passes.TrainingStep(mb, opt)
	require.NoError(t, err)
	return step
}

func programsText(progs []*program.Program) string {
	var b strings.Builder
	for _, p := range progs {
		b.WriteString(p.String())
		b.WriteString("\n")
	}
	return b.String()
}

func TestLowerGolden(t *testing.T) {
	cases := []struct {
		name string
		plan func(t testing.TB, step *ir.Graph) *codegen.Plan
		b    int
	}{
		{"lower_dp_1x2.golden", singleStage(1, 2, 2, dataParallel(mesh.Axis1), propagate), 2},
		{"lower_pp_1f1b.golden", pipeline([][2]int{{1, 1}, {1, 1}}, 4, program.OneFOneB, dataParallel(0), propagate), 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			step := microStep(t, 1, c.b, passes.Optimizer{Kind: "sgd", LR: 0.1})
			progs, err := codegen.Lower(c.plan(t, step))
			require.NoError(t, err)
			again, err := codegen.Lower(c.plan(t, step))
			require.NoError(t, err)
			require.Equal(t, programsText(progs), programsText(again), "lowering is not deterministic")
			golden.Check(t, c.name, programsText(progs))
		})
	}
}

func TestLowerErrors(t *testing.T) {
	step := microStep(t, 1, 1, passes.Optimizer{Kind: "sgd", LR: 0.1})
	valid := func(t testing.TB) *codegen.Plan {
		return singleStage(1, 2, 1, dataParallel(mesh.Axis1), propagate)(t, step)
	}
	lookup := func(name string) ir.ValueID {
		id, ok := step.Lookup(name)
		require.True(t, ok, name)
		return id
	}
	cases := []struct {
		name   string
		break_ func(p *codegen.Plan)
		want   string
	}{
		{"no micro-batches", func(p *codegen.Plan) { p.Microbatches = 0 }, "0 micro-batches"},
		{"short StageOf", func(p *codegen.Plan) { p.StageOf = p.StageOf[:3] }, "StageOf has 3 entries"},
		{"stage out of range", func(p *codegen.Plan) { p.StageOf[lookup("l0.relu")] = 5 }, "value l0.relu is on stage 5"},
		{"overlapping meshes", func(p *codegen.Plan) { p.Stages = append(p.Stages, p.Stages[0]) }, "device 0 is in stage 0 and stage 1"},
		{"missing layout", func(p *codegen.Plan) { delete(p.Stages[0].Out, lookup("l0.relu")) }, "value l0.relu has no layout"},
		{"missing strategy", func(p *codegen.Plan) { delete(p.Stages[0].In, lookup("l0.relu")) }, "op l0.relu has no operand layouts"},
		{"softmax row split", func(p *codegen.Plan) {
			id := lookup("d.ce.p")
			p.Stages[0].In[id] = []mesh.Spec{mesh.MustParseSpec("RS1")}
			p.Stages[0].Out[id] = mesh.MustParseSpec("RS1")
		}, "is fixed (the op needs it whole)"},
		{"inconsistent labels", func(p *codegen.Plan) {
			id := lookup("l0.fc.matmul")
			p.Stages[0].In[id] = []mesh.Spec{mesh.MustParseSpec("S1R"), mesh.MustParseSpec("RR")}
			p.Stages[0].Out[id] = mesh.MustParseSpec("RR")
		}, "result dim 0 is R but the same label is S1 elsewhere"},
		{"partial not declared", func(p *codegen.Plan) {
			id := lookup("l0.fc.matmul")
			p.Stages[0].In[id] = []mesh.Spec{mesh.MustParseSpec("RS1"), mesh.MustParseSpec("S1R")}
			p.Stages[0].Out[id] = mesh.MustParseSpec("RR")
		}, `result is partial on "", expected "1"`},
		{"indivisible", func(p *codegen.Plan) {
			p.Stages[0].Mesh = meshAt(t, 1, 3, 0)
		}, "cannot be split"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := valid(t)
			c.break_(p)
			_, err := codegen.Lower(p)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
		})
	}
}

func TestLowerMissingGradient(t *testing.T) {
	step := microStep(t, 1, 1, passes.Optimizer{Kind: "sgd", LR: 0.1})
	_, err := step.Declare(ir.OpParam, "unused", ir.Type{DType: ir.F64, Shape: ir.Shape{4}}, -1, ir.Pos{})
	require.NoError(t, err)
	p := singleStage(1, 1, 1, dataParallel(0), propagate)(t, step)
	_, err = codegen.Lower(p)
	require.ErrorContains(t, err, "param unused has no gradient, expected a value marked role=grad of=unused")
}

func TestLowerDeadlockRefused(t *testing.T) {
	step := microStep(t, 1, 2, passes.Optimizer{Kind: "sgd", LR: 0.1})
	p := pipeline([][2]int{{1, 1}, {1, 1}}, 2, program.GPipe, dataParallel(0), propagate)(t, step)
	for i, s := range p.StageOf { // run the pipeline backwards
		p.StageOf[i] = 1 - s
	}
	p.Stages[0], p.Stages[1] = p.Stages[1], p.Stages[0]
	_, err := codegen.Lower(p)
	require.NoError(t, err, "swapping stages with their layouts is still a valid pipeline")
	for i := range p.StageOf { // now tear the forward across stages: layer 0 after the head
		if strings.HasPrefix(step.Value(ir.ValueID(i)).Name, "l0.") && p.StageOf[i] == 1 {
			p.StageOf[i] = 0
		}
	}
	_, err = codegen.Lower(p)
	require.Error(t, err)
}

// Under 1F1B the first stage holds fewer micro-batches' activations than under GPipe, and
// the predicted peak shows it.
func TestOneFOneBHoldsLess(t *testing.T) {
	step := microStep(t, 3, 8, passes.Optimizer{Kind: "sgd", LR: 0.1})
	four := [][2]int{{1, 1}, {1, 1}, {1, 1}, {1, 1}}
	peak := func(s program.Schedule) int64 {
		p := pipeline(four, 8, s, dataParallel(0), propagate)(t, step)
		progs, err := codegen.Lower(p)
		require.NoError(t, err)
		return codegen.Predict(p, progs)[0].PeakBytes
	}
	require.Less(t, peak(program.OneFOneB), peak(program.GPipe))
}

// A program's size does not grow with the micro-batch count: the same micro-batch step
// lowered for 4, 64 and 1,024 micro-batches gives the same blocks and buffers, only the
// loops' bounds differ; 1F1B's predicted peak stays that of the micro-batches in flight,
// and the bytes moved grow by the same amount per micro-batch.
func TestProgramSizeIndependentOfMicrobatches(t *testing.T) {
	step := microStep(t, 3, 1, passes.Optimizer{Kind: "sgd", LR: 0.1})
	four := [][2]int{{1, 1}, {1, 1}, {1, 1}, {1, 1}}
	lower := func(s program.Schedule, b int) ([]*program.Program, []codegen.DeviceCounters) {
		p := pipeline(four, b, s, dataParallel(0), propagate)(t, step)
		progs, err := codegen.Lower(p)
		require.NoError(t, err)
		return progs, codegen.Predict(p, progs)
	}
	for _, s := range []program.Schedule{program.GPipe, program.OneFOneB} {
		small, cs := lower(s, 4)
		mid, cm := lower(s, 64)
		big, cb := lower(s, 1024)
		for d := range small {
			require.Len(t, big[d].Instrs, len(small[d].Instrs), "%s device %d", s, d)
			for i := range big[d].Instrs { // the same, but for the 1/B of the update
				a, b := small[d].Instrs[i], big[d].Instrs[i]
				a.Value, b.Value = 0, 0
				require.True(t, reflect.DeepEqual(a, b), "%s device %d instr %d: %s, expected %s", s, d, i, big[d].FormatInstr(i), small[d].FormatInstr(i))
			}
			require.Equal(t, small[d].Buffers, big[d].Buffers, "%s device %d", s, d)
			require.Equal(t, small[d].Blocks, big[d].Blocks, "%s device %d", s, d)
			require.Len(t, big[d].Schedule, len(mid[d].Schedule))
			text, err := big[d].MarshalJSON()
			require.NoError(t, err)
			require.Less(t, len(text), 64<<10, "%s device %d: %d bytes of JSON", s, d, len(text))
			perMB := cb[d].BytesSent - cm[d].BytesSent
			require.Equal(t, perMB*60, (cm[d].BytesSent-cs[d].BytesSent)*960, "%s device %d: bytes sent per micro-batch", s, d)
			if s == program.OneFOneB {
				require.Equal(t, cm[d].PeakBytes, cb[d].PeakBytes, "1f1b device %d holds more with more micro-batches", d)
			}
		}
		if s == program.GPipe {
			require.Greater(t, cb[0].PeakBytes, cm[0].PeakBytes, "gpipe holds every micro-batch's activations")
		}
	}
}
