package program

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/autopar/autopar/internal/golden"
	"github.com/autopar/autopar/ir"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func f32(shape ...int) ir.Type { return ir.Type{DType: ir.F32, Shape: shape} }

// sampleProgram is device 0 of a 2-device data-parallel step with a pipeline edge to
// device 2: every instruction kind appears at least once.
func sampleProgram() *Program {
	p := &Program{Device: 0}
	x := p.AddBuffer("x.mb0", f32(4, 8))
	w := p.AddBuffer("w1", f32(8, 16))
	h := p.AddBuffer("h.mb0", f32(4, 16))
	s := p.AddBuffer("s.mb0", f32(16))
	acc := p.AddBuffer("grad.w1.acc", f32(16))
	g := p.AddBuffer("g.mb0", f32(32))
	rs := p.AddBuffer("rs.mb0", f32(2, 16))
	a2a := p.AddBuffer("a2a.mb0", f32(1, 32))
	r := p.AddBuffer("h.mb0.recv", f32(4, 16))
	grp := []DeviceID{0, 1}
	p.Instrs = []Instr{
		{Kind: Load, Out: x, Name: "x", Offsets: []int{0, 0}},
		{Kind: Load, Out: w, Name: "w1", Offsets: []int{0, 0}},
		{Kind: Compute, Out: h, Op: ir.OpMatMul, Args: []BufferID{x, w}},
		{Kind: Compute, Out: s, Op: ir.OpReduceSum, Args: []BufferID{h}, Attrs: ir.Attrs{}.With("axes", []int{0})},
		{Kind: Constant, Out: acc, Value: 0},
		{Kind: AllReduce, Out: NoBuffer, Args: []BufferID{s}, Group: grp, Note: "grad.w1"},
		{Kind: Accumulate, Out: NoBuffer, Args: []BufferID{acc, s}},
		{Kind: AllGather, Out: g, Args: []BufferID{s}, Group: grp, Axis: 0},
		{Kind: ReduceScatter, Out: rs, Args: []BufferID{h}, Group: grp, Axis: 0},
		{Kind: AllToAll, Out: a2a, Args: []BufferID{rs}, Group: grp, Axis: 0, ConcatAxis: 1},
		{Kind: Send, Out: NoBuffer, Args: []BufferID{h}, Peer: 2, Tag: Tag{Value: "h", MicroBatch: 0}},
		{Kind: Recv, Out: r, Peer: 2, Tag: Tag{Value: "dh", MicroBatch: 0}},
		{Kind: Store, Out: NoBuffer, Args: []BufferID{acc}, Name: "w1.next", Offsets: []int{16}, Full: f32(32)},
		{Kind: Free, Out: NoBuffer, Args: []BufferID{x, w, h, s, g, rs, a2a, r, acc}},
	}
	return p
}

func TestProgramText(t *testing.T) {
	p := sampleProgram()
	require.NoError(t, p.Validate())
	golden.Check(t, "program_dp.golden", p.String())
}

func TestProgramJSONRoundTrip(t *testing.T) {
	p := sampleProgram()
	p.Instrs = append(p.Instrs,
		Instr{Kind: Constant, Out: p.AddBuffer("mask", f32(2)), Value: math.Inf(-1)},
		Instr{Kind: Compute, Out: p.AddBuffer("c", ir.Type{DType: ir.F64, Shape: ir.Shape{4, 16}}),
			Op: ir.OpCast, Args: []BufferID{8}, Attrs: ir.Attrs{}.With("to", ir.F64)},
		Instr{Kind: Constant, Out: p.AddBuffer("scalar", ir.Type{DType: ir.F32}), Value: -0.5})
	data, err := p.MarshalJSON()
	require.NoError(t, err)
	back, err := UnmarshalProgram(data)
	require.NoError(t, err)
	assert.Equal(t, p.String(), back.String())
	again, err := back.MarshalJSON()
	require.NoError(t, err)
	assert.Equal(t, string(data), string(again), "serialization must be byte-stable")
	assert.True(t, math.IsInf(back.Instrs[len(back.Instrs)-3].Value, -1))
	assert.Equal(t, p, back)
	golden.Check(t, "program_dp.json.golden", string(data))
}

func TestUnmarshalProgramErrors(t *testing.T) {
	tests := []struct{ name, json, want string }{
		{"version", `{"version":3,"device":0,"buffers":[],"instrs":[]}`, "unsupported version 3, expected 2"},
		{"version 1 with blocks", `{"version":1,"device":0,"microbatches":2,"buffers":[],"instrs":[]}`, "version 1 has no blocks"},
		{"kind", `{"version":1,"device":0,"buffers":[],"instrs":[{"kind":"jump"}]}`, `instr 0: unknown instruction kind "jump"`},
		{"op", `{"version":1,"device":0,"buffers":[],"instrs":[{"kind":"compute","op":"fft"}]}`, `unknown op "fft"`},
		{"attr", `{"version":1,"device":0,"buffers":[],"instrs":[{"kind":"compute","op":"matmul","attrs":{"axis":1}}]}`, `op matmul has no attribute "axis"`},
		{"type", `{"version":1,"device":0,"buffers":[{"name":"a","type":"f33[2]"}],"instrs":[]}`, `buffer 0: bad type "f33[2]"`},
		{"field", `{"version":1,"device":0,"buffers":[],"instrs":[{"kind":"free","bogus":1}]}`, `unknown field "bogus"`},
		{"syntax", `{"version":1`, "program json:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := UnmarshalProgram([]byte(tt.json))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestParseType(t *testing.T) {
	for _, s := range []string{"f32[8,512]", "i64[3]", "bf16[1,2,3]"} {
		got, err := ParseType(s)
		require.NoError(t, err)
		assert.Equal(t, s, got.String())
	}
	scalar, err := ParseType("f64[]")
	require.NoError(t, err)
	assert.Equal(t, ir.Type{DType: ir.F64}, scalar)
	for _, s := range []string{"f32", "f32[a]", "x[1]", "f32[-1]"} {
		_, err := ParseType(s)
		assert.Error(t, err, s)
	}
}

func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name string
		edit func(p *Program)
		want string
	}{
		{"use after free", func(p *Program) {
			p.Instrs = append(p.Instrs, Instr{Kind: Send, Out: NoBuffer, Args: []BufferID{2}, Peer: 1, Tag: Tag{Value: "h"}})
		}, "device0.prog:25:1: send: buffer %2 (h.mb0) is used after it is freed, expected a live buffer\n\tdevice0.prog:24:1: note: freed here"},
		{"use before def", func(p *Program) { p.Instrs[2].Args[0] = 8 }, "buffer %8 (h.mb0.recv) is used before it is defined"},
		{"undeclared", func(p *Program) { p.Instrs[2].Args[1] = 42 }, "buffer %42 is not declared"},
		{"defined twice", func(p *Program) { p.Instrs[1].Out = 0 }, "device0.prog:12:1: load: buffer %0 (x.mb0) is defined twice"},
		{"shape rule", func(p *Program) { p.Buffers[1].Type = f32(7, 16) }, "matmul"},
		{"out type", func(p *Program) { p.Buffers[2].Type = f32(4, 17) }, "matmul gives f32[4,16], but buffer %2 is declared f32[4,17]"},
		{"leaf op", func(p *Program) { p.Instrs[2].Op = ir.OpParam }, "op param cannot be computed"},
		{"group without self", func(p *Program) { p.Instrs[5].Group = []DeviceID{1, 2} }, "group [1,2] does not contain device 0"},
		{"group twice", func(p *Program) { p.Instrs[5].Group = []DeviceID{0, 0} }, "lists device 0 twice"},
		{"gather type", func(p *Program) { p.Instrs[7].Group = []DeviceID{0, 1, 2} }, "gives f32[48], but buffer %5 is declared f32[32]"},
		{"scatter divides", func(p *Program) { p.Instrs[8].Group = []DeviceID{0, 1, 2} }, "do not fit f32[4,16] split 3 ways"},
		{"accumulate types", func(p *Program) { p.Instrs[6].Args[1] = 2 }, "%4 is f32[16] but %2 is f32[4,16]"},
		{"peer self", func(p *Program) { p.Instrs[10].Peer = 0 }, "send: peer 0, expected another device"},
		{"no tag", func(p *Program) { p.Instrs[11].Tag = Tag{} }, "recv: no tag"},
		{"store overrun", func(p *Program) { p.Instrs[12].Offsets = []int{17} }, "overruns f32[32] on dim 0"},
		{"load offsets", func(p *Program) { p.Instrs[0].Offsets = []int{0} }, "offsets [0], expected 2 non-negative offsets"},
		{"missing out", func(p *Program) { p.Instrs[4].Out = NoBuffer }, "constant: defines no buffer, expected a result"},
		{"stray out", func(p *Program) { p.Instrs[5].Out = 3 }, "all_reduce: defines %3, expected no result"},
		{"no dtype", func(p *Program) { p.Buffers[3].Type = ir.Type{} }, "device0.prog:5:1: buffer %3 (s.mb0) has no dtype"},
		{"double free", func(p *Program) { p.Instrs[13].Args = append(p.Instrs[13].Args, 0) }, "free: buffer %0 (x.mb0) is used after it is freed"},
		{"empty free", func(p *Program) { p.Instrs[13].Args = nil }, "free: nothing to free"},
		{"bad kind", func(p *Program) { p.Instrs[0].Kind = KindInvalid }, "unknown instruction kind 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sampleProgram()
			tt.edit(p)
			err := p.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestCollectiveOut(t *testing.T) {
	tests := []struct {
		kind       Kind
		in         ir.Type
		n, ax, cat int
		want       ir.Type
		ok         bool
	}{
		{AllReduce, f32(4, 6), 4, 0, 0, f32(4, 6), true},
		{AllGather, f32(4, 6), 3, 1, 0, f32(4, 18), true},
		{ReduceScatter, f32(4, 6), 2, 0, 0, f32(2, 6), true},
		{ReduceScatter, f32(4, 6), 4, 1, 0, ir.Type{}, false},
		{AllToAll, f32(4, 6), 2, 0, 1, f32(2, 12), true},
		{AllToAll, f32(4, 6), 2, 1, 1, f32(4, 6), true},
		{AllGather, f32(4), 2, 1, 0, ir.Type{}, false},
	}
	for _, tt := range tests {
		got, ok := CollectiveOut(tt.kind, tt.in, tt.n, tt.ax, tt.cat)
		require.Equal(t, tt.ok, ok, "%s %s", tt.kind, tt.in)
		if ok {
			assert.Equal(t, tt.want.String(), got.String())
		}
	}
}

func TestKindNames(t *testing.T) {
	for k := Compute; k < numKinds; k++ {
		back, ok := ParseKind(k.String())
		require.True(t, ok, k.String())
		assert.Equal(t, k, back)
	}
	_, ok := ParseKind("invalid")
	assert.False(t, ok)
}

// loopProgram is device 0 of a 2-stage pipeline of 3 micro-batches in the loop form: a
// prologue, a forward and a backward per micro-batch under 1F1B, and the update.
func loopProgram() *Program {
	p := &Program{Device: 0, Microbatches: 3}
	w := p.AddBuffer("w", f32(8, 16))
	acc := p.AddBuffer("grad.w.acc", f32(8, 16))
	perMB := func(name string, t ir.Type) BufferID {
		p.Buffers = append(p.Buffers, BufferDecl{Name: name, Type: t, PerMicrobatch: true})
		return BufferID(len(p.Buffers) - 1)
	}
	x, h, dh, g := perMB("x", f32(4, 8)), perMB("h", f32(4, 16)), perMB("d.h", f32(4, 16)), perMB("grad.w", f32(8, 16))
	p.Instrs = []Instr{
		{Kind: Load, Out: w, Name: "w", Offsets: []int{0, 0}},
		{Kind: Constant, Out: acc},
		{Kind: Load, Out: x, Name: "x", Offsets: []int{0, 0}, Stride: []int{4, 0}},
		{Kind: Compute, Out: h, Op: ir.OpMatMul, Args: []BufferID{x, w}},
		{Kind: Send, Out: NoBuffer, Args: []BufferID{h}, Peer: 1, Tag: Tag{Value: "h"}},
		{Kind: Free, Out: NoBuffer, Args: []BufferID{h}},
		{Kind: Recv, Out: dh, Peer: 1, Tag: Tag{Value: "d.h"}},
		{Kind: Compute, Out: g, Op: ir.OpEinsum, Args: []BufferID{x, dh}, Attrs: ir.Attrs{}.With("spec", "mk,mn->kn")},
		{Kind: Accumulate, Out: NoBuffer, Args: []BufferID{acc, g}},
		{Kind: Free, Out: NoBuffer, Args: []BufferID{x, dh, g}},
		{Kind: Store, Out: NoBuffer, Args: []BufferID{acc}, Name: "grad.w", Offsets: []int{0, 0}, Full: f32(8, 16)},
		{Kind: Free, Out: NoBuffer, Args: []BufferID{w, acc}},
	}
	p.Blocks = []Block{{"prologue", 0, 2, false}, {"forward", 2, 6, true}, {"backward", 6, 10, true}, {"update", 10, 12, false}}
	once := func(b int) Loop { return Loop{From: 0, To: 1, Body: []Call{{Block: b}}} }
	p.Schedule = []Loop{once(0),
		{From: 0, To: 1, Body: []Call{{Block: 1}}},
		{From: 0, To: 2, Body: []Call{{Block: 1, Shift: 1}, {Block: 2}}},
		{From: 2, To: 3, Body: []Call{{Block: 2}}},
		once(3)}
	return p
}

func TestLoopProgramForms(t *testing.T) {
	p := loopProgram()
	require.NoError(t, p.Validate())
	golden.Check(t, "program_loop.golden", p.String())
	data, err := p.MarshalJSON()
	require.NoError(t, err)
	golden.Check(t, "program_loop.json.golden", string(data))
	back, err := UnmarshalProgram(data)
	require.NoError(t, err)
	assert.Equal(t, p, back)
	var run []string
	for b, mb := range p.Calls {
		run = append(run, fmt.Sprintf("%s%d", p.Blocks[b].Name[:1], mb))
	}
	assert.Equal(t, "p-1 f0 f1 b0 f2 b1 b2 u-1", strings.Join(run, " "))
	n := 0
	for pc, mb := range p.Execution {
		if pc == 2 {
			assert.Equal(t, []int{4 * mb, 0}, LoadOffsets(&p.Instrs[pc], mb))
		}
		n++
	}
	assert.Equal(t, 2+3*4+3*4+2, n)
	// codegen's TestPredictLoopProgram holds Predict to this program's counts.
}

func TestValidateLoopErrors(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(p *Program)
		want   string
	}{
		{"stride in a step block", func(p *Program) { p.Instrs[0].Stride = []int{1, 0} }, "stride [1,0] in a block of the step"},
		{"negative stride", func(p *Program) { p.Instrs[2].Stride = []int{-4, 0} }, "expected 2 non-negative strides"},
		{"overflowing stride", func(p *Program) { p.Instrs[2].Stride = []int{math.MaxInt/2 + 1, 0} }, "keep the offsets of micro-batch 2 in an int"},
		{"micro-batch buffer in the prologue", func(p *Program) { p.Buffers[0].PerMicrobatch = true }, "buffer %0 (w) of a micro-batch is defined in a block of the step"},
		{"step buffer defined per micro-batch", func(p *Program) { p.Buffers[3].PerMicrobatch = false }, "buffer %3 (h) of the step is defined in a micro-batch block"},
		{"leak", func(p *Program) { p.Instrs[9].Args = p.Instrs[9].Args[:2] }, "buffer %5 (grad.w) of the micro-batch is never freed"},
		{"tag of another micro-batch", func(p *Program) { p.Instrs[4].Tag.MicroBatch = 1 }, "tag h@mb1 in a micro-batch block"},
		{"backward first", func(p *Program) {
			p.Schedule = []Loop{p.Schedule[0], {From: 0, To: 3, Body: []Call{{Block: 2}}}, {From: 0, To: 3, Body: []Call{{Block: 1}}}, p.Schedule[4]}
		}, "block 2 (backward) runs for micro-batch 0 before block 1 (forward) has"},
		{"update twice", func(p *Program) { p.Schedule = append(p.Schedule, p.Schedule[4]) }, "block 3 (update) of the step runs again"},
		{"micro-batch missing", func(p *Program) { p.Schedule = append(p.Schedule[:3], p.Schedule[4]) }, "block 3 (update) of the step runs when block 2 (backward) has run for 2 of the 3 micro-batches"},
		{"no update", func(p *Program) { p.Schedule = p.Schedule[:4] }, "block 3 (update) runs 0 times, expected 1"},
		{"micro-batches out of order", func(p *Program) { p.Schedule[1].Body[0].Shift = 1 }, "runs for micro-batch 1, expected micro-batch 0"},
		{"loop past the end", func(p *Program) { p.Schedule[3].To = 4 }, "expected them within [0, 3)"},
		{"once block looped", func(p *Program) { p.Schedule[0].To = 2 }, "expected it alone in [0, 1)"},
		{"gap between blocks", func(p *Program) { p.Blocks[1].Start = 3 }, "block 1 (forward) spans instructions [3, 6), expected [2, …)"},
		{"blocks short", func(p *Program) { p.Blocks[3].End = 11 }, "blocks end at instruction 11, expected them to cover all 12"},
		{"unknown block", func(p *Program) { p.Schedule[1].Body[0].Block = 7 }, "calls block 7, expected one of the 4 blocks"},
		{"no micro-batches", func(p *Program) { p.Microbatches = 0 }, "0 micro-batches, expected 1 to"},
		{"too many micro-batches", func(p *Program) { p.Microbatches = MaxMicrobatches + 1 }, "expected 1 to 1048576"},
		{"schedule without blocks", func(p *Program) { p.Blocks = nil }, "schedule without blocks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := loopProgram()
			c.break_(p)
			err := p.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.NotEmpty(t, p.String())
		})
	}
}

// Validate's shortcut over a loop's iterations agrees with expanding it: on random
// schedules of loopProgram's blocks, Validate accepts exactly the schedules whose calls,
// checked one by one, pass. (codegen's TestPredictAgreesWithExpansion holds Predict to the
// walk of every instruction on the same kind of schedules.)
func TestScheduleShortcutsAgreeWithExpansion(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	accepted := 0
	for range 3000 {
		p := loopProgram()
		p.Microbatches = 1 + rng.Intn(6)
		B := p.Microbatches
		// A 1F1B schedule with w warm-up forwards, or GPipe, its loops cut at random
		// points, then perhaps one field broken.
		w := rng.Intn(B + 1)
		loops := []Loop{{From: 0, To: w, Body: []Call{{Block: 1}}},
			{From: 0, To: B - w, Body: []Call{{Block: 1, Shift: w}, {Block: 2}}},
			{From: B - w, To: B, Body: []Call{{Block: 2}}}}
		if rng.Intn(3) == 0 {
			loops = []Loop{{From: 0, To: B, Body: []Call{{Block: 1}}}, {From: 0, To: B, Body: []Call{{Block: 2}}}}
		}
		p.Schedule = []Loop{{From: 0, To: 1, Body: []Call{{Block: 0}}}}
		for _, l := range loops {
			if cut := l.From + rng.Intn(l.To-l.From+1); cut > l.From && cut < l.To {
				p.Schedule = append(p.Schedule, Loop{From: l.From, To: cut, Body: l.Body}, Loop{From: cut, To: l.To, Body: l.Body})
			} else if l.To > l.From {
				p.Schedule = append(p.Schedule, l)
			}
		}
		p.Schedule = append(p.Schedule, Loop{From: 0, To: 1, Body: []Call{{Block: 3}}})
		if rng.Intn(2) == 0 {
			l := &p.Schedule[rng.Intn(len(p.Schedule))]
			l.Body = slices.Clone(l.Body)
			c := &l.Body[rng.Intn(len(l.Body))]
			switch rng.Intn(5) {
			case 0:
				l.From += rng.Intn(3) - 1
			case 1:
				l.To += rng.Intn(3) - 1
			case 2:
				c.Shift += rng.Intn(3) - 1
			case 3:
				c.Block = rng.Intn(4)
			case 4:
				l.Body = append(l.Body, *c)
			}
		}
		naive := validator{p: p}
		ok := naive.structure()
		runs := make([]int, len(p.Blocks))
		for _, l := range p.Schedule {
			for i := l.From; i < l.To && ok; i++ {
				for _, c := range l.Body {
					ok = ok && naive.call(runs, c.Block, i+c.Shift) == ""
				}
			}
		}
		for j, b := range p.Blocks {
			ok = ok && (runs[j] == B || (!b.PerMicrobatch && runs[j] == 1))
		}
		err := p.Validate()
		require.Equal(t, ok, err == nil, "%s\n%v", p.String(), err)
		if err == nil {
			accepted++
		}
	}
	require.Greater(t, accepted, 1000, "too few random schedules are valid to test Predict")
	require.Less(t, accepted, 2700, "too few random schedules are broken to test Validate")
}
