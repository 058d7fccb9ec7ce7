package autopar

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
)

// The compiler's recomputing plans, run on the runtime, equal the serial run: data
// parallel, tensor parallel and pipelined, MLP and GPT. checkAgainstSerial checks the
// loss, gradients and updates, checkCounters the measured peak memory and traffic against
// codegen.Predict.
func TestCompiledRematPlansEqualSerial(t *testing.T) {
	cases := []struct {
		model, cluster string
		opts           Options
	}{
		{"mlp-tiny", "cpu:2", Options{Microbatches: 2, Remat: RematFull}},
		{"mlp-tiny", "cpu:4", Options{Microbatches: 4, Remat: RematFull, Manual: &Manual{TP: 1, PP: 2, DP: 2}}},
		{"mlp-tiny", "cpu:4", Options{Microbatches: 2, Schedule: "gpipe", Remat: RematFull, Optimizer: passes.Optimizer{Kind: "adam", LR: 0.01}}},
		{"gpt-tiny", "cpu:2", Options{Microbatches: 2, Layers: 2, Remat: RematFull}},
		{"gpt-tiny", "cpu:4", Options{Microbatches: 2, Layers: 2, Remat: RematFull, Manual: &Manual{TP: 2, PP: 2, DP: 1}}},
	}
	var ways [2]int // stages recomputing whole, layer by layer
	for _, tc := range cases {
		t.Run(tc.model+"/"+tc.cluster, func(t *testing.T) {
			p := compile(t, model(t, tc.model), cluster(t, tc.cluster), tc.opts)
			for i, s := range p.Stages {
				require.True(t, s.Recompute, "stage %d", i)
				if s.RecomputeLayers {
					ways[1]++
				} else {
					ways[0]++
				}
			}
			checkAgainstSerial(t, p, 1e-4)
			checkCounters(t, p)
		})
	}
	// Full recomputation takes the faster way that fits: layer by layer for stages of
	// several layers (their checkpoints are not recomputed), whole for one-layer stages.
	require.Positive(t, ways[0], "no plan recomputes a whole stage")
	require.Positive(t, ways[1], "no plan recomputes layer by layer")
}

// With --remat auto the search recomputes exactly where memory forces it: a GPT under
// GPipe with 8 micro-batches on one device holds 8 micro-batches' activations plainly and
// only their inputs recomputing. With memory between the two needs, none is refused with
// a memory error and auto recomputes, within the budget and slower than the plain plan;
// with ample memory auto does not recompute.
func TestRematAutoWhenMemoryForces(t *testing.T) {
	g, c := model(t, "gpt-tiny"), cluster(t, "cpu:1")
	opts := func(remat string, memory int64) Options {
		return Options{Microbatches: 8, Schedule: "gpipe", Layers: 2, Remat: remat, MemoryPerDevice: memory}
	}
	plain := compile(t, g, c, opts(RematNone, 0))
	full := compile(t, g, c, opts(RematFull, 0))
	need := func(p *Plan) (m int64) {
		for _, s := range p.Stages {
			m = max(m, s.MemoryBytes)
		}
		return m
	}
	t.Logf("per-device need: plain %d, recomputing %d bytes; step %.3g s, %.3g s", need(plain), need(full), plain.Predicted.StepTime, full.Predicted.StepTime)
	require.Less(t, need(full), need(plain), "recomputing holds less")
	require.Greater(t, full.Predicted.StepTime, plain.Predicted.StepTime, "recomputing takes longer")

	budget := (need(full) + need(plain)) / 2
	_, err := Compile(context.Background(), g, c, opts(RematNone, budget))
	var me *dp.MemoryError
	require.ErrorAs(t, err, &me)
	require.ErrorContains(t, err, "with --remat none; recomputing activations, --remat auto or full, may need less")

	auto := compile(t, g, c, opts(RematAuto, budget))
	recomputes := 0
	for _, s := range auto.Stages {
		assert.LessOrEqual(t, s.MemoryBytes, budget)
		assert.Equal(t, s.WeightBytes+int64(s.InFlight)*s.ActBytes+s.RecomputeBytes, s.MemoryBytes)
		if s.Recompute {
			recomputes++
		}
	}
	require.Positive(t, recomputes, "auto recomputes when memory forces it")
	assert.Greater(t, auto.Predicted.StepTime, plain.Predicted.StepTime)
	checkAgainstSerial(t, auto, 1e-4)
	checkCounters(t, auto)

	ample := compile(t, g, c, opts(RematAuto, 0))
	for i, s := range ample.Stages {
		assert.False(t, s.Recompute, "stage %d recomputes with memory to spare", i)
	}
	assert.Equal(t, plain.Predicted.StepTime, ample.Predicted.StepTime)

	// A saved recomputing plan re-costs to itself: From pins each stage's choice.
	var buf bytes.Buffer
	require.NoError(t, auto.WriteJSON(&buf))
	saved, err := ReadPlan(&buf)
	require.NoError(t, err)
	again := compile(t, g, c, Options{From: saved, MemoryPerDevice: budget})
	for i := range auto.Stages {
		assert.Equal(t, auto.Stages[i].Recompute, again.Stages[i].Recompute, "stage %d", i)
	}
}

func TestRematOptionErrors(t *testing.T) {
	_, err := Compile(context.Background(), model(t, "mlp-tiny"), cluster(t, "cpu:1"), Options{Remat: "some"})
	require.EqualError(t, err, `compile: unknown recomputation "some", expected auto, none or full`)
}

// runStep runs progs, p's programs, for one step on the serial step's initial params and
// inputs of 2, over tr when given (else a fresh in-process transport).
func runStep(t *testing.T, p *Plan, progs []*program.Program, tr ...runtime.Transport) *runtime.Result {
	t.Helper()
	full, err := passes.TrainingStep(p.Forward(), p.Optimizer.Optimizer())
	require.NoError(t, err)
	data := runtime.Data{}
	for k, v := range interp.InitParams(full, 1) {
		data[k] = v
	}
	in, err := interp.GenerateInputs(full, 2)
	require.NoError(t, err)
	for k, v := range in {
		data[k] = v
	}
	opts := runtime.Options{}
	if len(tr) > 0 {
		opts.Transport = tr[0]
	}
	got, err := runtime.Run(context.Background(), progs, data, opts)
	require.NoError(t, err)
	return got
}

// checkCounters runs p's programs once and checks every device's measured peak memory and
// traffic against codegen.Predict.
func checkCounters(t *testing.T, p *Plan) {
	t.Helper()
	progs, err := p.Programs()
	require.NoError(t, err)
	got := runStep(t, p, progs)
	cp, err := p.CodegenPlan()
	require.NoError(t, err)
	pred := codegen.Predict(cp, progs)
	for i, d := range got.Devices {
		require.Equal(t, pred[i], codegen.DeviceCounters{Device: d.Device, PeakBytes: d.PeakBytes,
			BytesSent: d.BytesSent, BytesReceived: d.BytesReceived}, "device %d", d.Device)
	}
}

// A plan.json that claims recomputed activations for a stage that does not recompute, or a
// negative count of them, is refused; one that sets recompute on a stage lowers to
// recomputing programs.
func TestReadPlanRecompute(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:2"), Options{Microbatches: 2, Remat: RematNone}).WriteJSON(&buf))
	good := buf.String()
	edit := func(with string) string {
		return strings.Replace(good, `"in_flight": `, with+` "in_flight": `, 1) // stage 0's
	}
	_, err := ReadPlan(strings.NewReader(edit(`"recompute_bytes": 100,`)))
	require.ErrorContains(t, err, "recompute_bytes 100 of a stage that does not recompute")
	_, err = ReadPlan(strings.NewReader(edit(`"recompute": true, "recompute_bytes": -1,`)))
	require.ErrorContains(t, err, "recompute_bytes -1")
	_, err = ReadPlan(strings.NewReader(edit(`"recompute_layers": true,`)))
	require.ErrorContains(t, err, "recompute_layers of a stage that does not recompute")
	for _, with := range []string{`"recompute": true,`, `"recompute": true, "recompute_layers": true,`} {
		p, err := ReadPlan(strings.NewReader(edit(with)))
		require.NoError(t, err)
		require.True(t, p.Stages[0].Recompute)
		checkAgainstSerial(t, p, 1e-4)
		checkCounters(t, p)
	}
}
