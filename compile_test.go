package autopar

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Every Compile of this package's tests runs each phase's verifier after it; benchmarks
	// time the compiler as a user runs it.
	checkEveryPhase = flag.Lookup("test.bench").Value.String() == ""
	goleak.VerifyTestMain(m)
}

func model(t testing.TB, name string) *ir.Graph {
	t.Helper()
	g, err := frontend.ParseFile("testdata/models/" + name + ".ir")
	require.NoError(t, err)
	return g
}

func cluster(t testing.TB, spec string) *mesh.Cluster {
	t.Helper()
	c, err := mesh.ParseCluster(spec)
	require.NoError(t, err)
	return c
}

func compile(t testing.TB, g *ir.Graph, c *mesh.Cluster, opts Options) *Plan {
	t.Helper()
	p, err := Compile(context.Background(), g, c, opts)
	require.NoError(t, err)
	return p
}

func TestPlanJSONIsDeterministicAndRoundTrips(t *testing.T) {
	g := model(t, "mlp-tiny")
	c := cluster(t, "cpu:4")
	var a, b, again bytes.Buffer
	p := compile(t, g, c, Options{Microbatches: 2})
	require.NoError(t, p.WriteJSON(&a))
	require.NoError(t, compile(t, g, c, Options{Microbatches: 2}).WriteJSON(&b))
	assert.Equal(t, a.String(), b.String(), "the same input gives the same plan.json")

	q, err := ReadPlan(bytes.NewReader(a.Bytes()))
	require.NoError(t, err)
	require.NoError(t, q.WriteJSON(&again))
	assert.Equal(t, a.String(), again.String(), "plan.json round-trips")
	require.NoError(t, q.CheckModel(g))
	require.NoError(t, q.CheckCluster(c))

	pa, err := p.Programs()
	require.NoError(t, err)
	qa, err := q.Programs()
	require.NoError(t, err)
	require.Len(t, qa, len(pa))
	for i := range pa {
		assert.Equal(t, pa[i].String(), qa[i].String(), "device %d program", pa[i].Device)
	}
}

func TestReadPlanErrors(t *testing.T) {
	g := model(t, "mlp-tiny")
	var buf bytes.Buffer
	require.NoError(t, compile(t, g, cluster(t, "cpu:2"), Options{Microbatches: 1}).WriteJSON(&buf))
	good := buf.String()

	_, err := ReadPlan(bytes.NewReader([]byte(good[:len(good)/2])))
	require.ErrorContains(t, err, "corrupt plan.json")
	_, err = ReadPlan(bytes.NewReader(bytes.Replace([]byte(good), []byte(`"version": 1`), []byte(`"version": 7`), 1)))
	require.ErrorContains(t, err, "version 7")
	_, err = ReadPlan(bytes.NewReader(bytes.Replace([]byte(good), []byte("relu"), []byte("tanh"), 1)))
	require.ErrorContains(t, err, "does not match its hash")

	p, err := ReadPlan(bytes.NewReader([]byte(good)))
	require.NoError(t, err)
	require.ErrorContains(t, p.CheckModel(model(t, "gpt-tiny")), "belongs to model mlp")
	require.ErrorContains(t, p.CheckCluster(cluster(t, "cpu:4")), "compiled for cluster")
}

// relErr is max|a−b| over max(max|a|, max|b|, 1e-4): element-wise ratios blow up on
// entries that cancel to rounding noise, and a tensor that vanishes mathematically (the
// gradient of attention's key bias, which softmax cancels) is f32 rounding noise of about
// 1e-9 on both sides, so the scale is floored.
func relErr(a, b *kernels.Tensor) float64 {
	if a == nil || b == nil || a.Len() != b.Len() {
		return math.Inf(1)
	}
	var diff, scale float64
	for i := range a.Len() {
		x, y := a.At(i), b.At(i)
		diff = max(diff, math.Abs(x-y))
		scale = max(scale, math.Abs(x), math.Abs(y))
	}
	return diff / max(scale, 1e-4)
}

// checkAgainstSerial runs three steps of the plan on the runtime and of the full-batch
// step on the serial interpreter and compares loss, gradients and updated params and state.
func checkAgainstSerial(t *testing.T, p *Plan, tol float64) { checkAgainstSerialSteps(t, p, tol, 3) }

// checkAgainstSerialSteps is checkAgainstSerial over the given number of steps.
func checkAgainstSerialSteps(t *testing.T, p *Plan, tol float64, steps int) {
	t.Helper()
	checkAgainstSerialRun(t, p, tol, nil, steps)
}

// checkAgainstSerialFrom is checkAgainstSerial starting from the given params (an imported
// model's weights) instead of random ones.
func checkAgainstSerialFrom(t *testing.T, p *Plan, tol float64, weights map[string]*kernels.Tensor) {
	t.Helper()
	checkAgainstSerialRun(t, p, tol, weights, 3)
}

// checkAgainstSerialRun runs steps steps from weights (random params when nil).
func checkAgainstSerialRun(t *testing.T, p *Plan, tol float64, weights map[string]*kernels.Tensor, steps int) {
	t.Helper()
	ctx := context.Background()
	progs, err := p.Programs()
	require.NoError(t, err)
	full, err := passes.TrainingStep(p.Forward(), p.Optimizer.Optimizer())
	require.NoError(t, err)
	ref := interp.InitParams(full, 1)
	for k, v := range weights {
		ref[k] = v.Clone()
	}
	data, err := interp.GenerateInputs(full, 2)
	require.NoError(t, err)
	for k, v := range data {
		ref[k] = v
	}
	par := runtime.Data{}
	for k, v := range ref {
		par[k] = v
	}
	loss := full.Value(full.Outputs[0].Value).Name
	for step := range steps {
		want, err := interp.RunKeep(ctx, full, ref)
		require.NoError(t, err)
		got, err := runtime.Run(ctx, progs, par, runtime.Options{})
		require.NoError(t, err, "step %d", step)
		require.Less(t, relErr(got.Stores[loss], want.Outputs[0]), tol, "step %d loss", step)
		for _, pid := range full.Leaves(ir.OpParam) {
			name := "grad." + full.Value(pid).Name
			gid, _ := full.Lookup(name)
			require.Less(t, relErr(got.Stores[name], want.Values[gid]), tol, "step %d %s", step, name)
		}
		for _, u := range full.Updates {
			name := full.Value(u.Target).Name
			require.Less(t, relErr(got.Stores[name], want.Updates[name]), tol, "step %d %s", step, name)
			par[name] = got.Stores[name]
		}
		ref.Apply(want)
	}
}

// The compiler's own plans, not hand-made ones, run on the runtime equal the serial run.
func TestCompiledPlansEqualSerial(t *testing.T) {
	cases := []struct {
		model, cluster string
		opts           Options
	}{
		{"mlp-tiny", "cpu:2", Options{Microbatches: 1}},
		{"mlp-tiny", "cpu:4", Options{Microbatches: 4}},
		{"mlp-tiny", "cpu:4", Options{Microbatches: 2, Schedule: "gpipe", Optimizer: passes.Optimizer{Kind: "adam", LR: 0.01}}},
		{"gpt-tiny", "cpu:2", Options{Microbatches: 2, Layers: 2}},
		{"mlp-tiny", "cpu:4", Options{Microbatches: 2, Manual: &Manual{TP: 2, PP: 2, DP: 1}}},
		// Its first stage splits the embedding table's rows (vocab-parallel: a masked lookup).
		{"gpt-tiny", "cpu:4", Options{Microbatches: 4, Layers: 2, Manual: &Manual{TP: 2, PP: 2, DP: 1}}},
		{"moe-tiny", "cpu:2", Options{Microbatches: 2, Layers: 2}},
		{"wresnet-tiny", "cpu:2", Options{Microbatches: 1, Layers: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.model+"/"+tc.cluster, func(t *testing.T) {
			p := compile(t, model(t, tc.model), cluster(t, tc.cluster), tc.opts)
			checkAgainstSerial(t, p, 1e-4)
		})
	}
}

// Issue 4's acceptance test: a GPT on 2 hosts × 4 devices is pipelined when the hosts are
// linked slowly and sharded within one stage when they are linked fast. Its devices are
// slow (1 GFLOP/s) and its micro-batches short (2 × 16 tokens), so that compute, not the
// activations a pipeline sends between the hosts, is what the second host saves: on a
// fast device every cross-host byte costs more than computing the whole step on one host
// twice over, and one stage replicated across the hosts is predicted faster (the search
// prices a whole-host stage's receives across hosts, where it sits: docs/DECISIONS.md,
// branches currency and hosts).
func TestSlowLinksMakePipelines(t *testing.T) {
	m := zoo.NewGPT()
	m.Layers, m.Hidden, m.Heads, m.Seq, m.Vocab, m.Batch = 2, 1024, 8, 16, 256, 8
	g, err := m.Build()
	require.NoError(t, err)
	stages := func(interHost float64) int {
		c := cluster(t, "dgx-a100:2")
		c.DevicesPerHost = 4
		c.DeviceFLOPS, c.FLOPs = 1e9, nil
		c.InterHostBandwidth = interHost
		c.IntraHostLatency, c.InterHostLatency = 1e-9, 1e-9
		c.KernelOverhead = 0 // launches would favour stages of fewer ops whatever the links
		p := compile(t, g, c, Options{Microbatches: 4, Layers: 2})
		return len(p.Stages)
	}
	assert.Greater(t, stages(1e6), 1, "1 MB/s between hosts: pipeline stages")
	assert.Equal(t, 1, stages(1e15), "1 PB/s between hosts: one stage over all devices")
}

func TestCompileErrors(t *testing.T) {
	g := model(t, "mlp-tiny")
	ctx := context.Background()
	c := cluster(t, "cpu:4")

	_, err := Compile(ctx, g, c, Options{Microbatches: 3})
	require.ErrorContains(t, err, "not divisible by 3 micro-batches")

	_, err = Compile(ctx, g, c, Options{Manual: &Manual{TP: 2, PP: 1, DP: 1}})
	require.ErrorContains(t, err, "uses 2 devices but cluster")

	_, err = Compile(ctx, g, c, Options{MemoryPerDevice: 1024, Microbatches: 1})
	var me *dp.MemoryError
	require.True(t, errors.As(err, &me), "%v", err)
	assert.Greater(t, me.Need, 1024.0)

	_, err = Compile(ctx, g, c, Options{Microbatches: 1, Constraints: dp.Constraints{Boundaries: []int{0, 9}}})
	require.Error(t, err)

	_, err = Compile(ctx, g, c, Options{Schedule: "zigzag"})
	require.ErrorContains(t, err, "zigzag")

	step, err := passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.1})
	require.NoError(t, err)
	_, err = Compile(ctx, step, c, Options{})
	require.ErrorContains(t, err, "already holds a training step")

	_, err = ParseManual("tp=2,xx=3")
	require.ErrorContains(t, err, "unknown degree")

	// batch_norm takes statistics over the batch: micro-batches would change them.
	_, err = Compile(ctx, model(t, "wresnet-tiny"), cluster(t, "cpu:2"), Options{Microbatches: 2})
	require.ErrorContains(t, err, "2 micro-batches would change what stem.bn.batch_norm (batch_norm) computes")
}

// A saved plan, pinned as constraints, is re-costed to the same stages and prediction.
func TestConstraintsOfRecostsAPlan(t *testing.T) {
	g := model(t, "mlp-tiny")
	c := cluster(t, "cpu:4")
	p := compile(t, g, c, Options{Microbatches: 4})
	q := compile(t, g, c, Options{Microbatches: p.Microbatches, Layers: len(p.Layers), Constraints: ConstraintsOf(p)})
	require.Equal(t, len(p.Stages), len(q.Stages))
	for i := range p.Stages {
		assert.Equal(t, p.Stages[i].Devices, q.Stages[i].Devices)
		assert.Equal(t, p.Stages[i].Values, q.Stages[i].Values)
	}
	assert.Equal(t, p.Predicted.StepTime, q.Predicted.StepTime)
	// The lazy fast search solves few layers itself (bound.go), so compare with the stages.
	assert.LessOrEqual(t, q.Predicted.Solves, len(q.Stages), "a pinned stage needs one solve")

	_, err := Compile(context.Background(), g, c, Options{Microbatches: 4, Layers: 2, Constraints: ConstraintsOf(p)})
	require.ErrorContains(t, err, "pinned stages end at layer")
}

// The memory a memory error names is the least that fits: with it the plan compiles, with
// one byte less it does not.
func TestMemoryErrorNamesTheLeastThatFits(t *testing.T) {
	g := model(t, "mlp-tiny")
	c := cluster(t, "cpu:4")
	opts := Options{Microbatches: 1, Manual: &Manual{TP: 4, PP: 1, DP: 1}, MemoryPerDevice: 4000}
	_, err := Compile(context.Background(), g, c, opts)
	var me *dp.MemoryError
	require.True(t, errors.As(err, &me), "%v", err)
	opts.MemoryPerDevice = int64(math.Ceil(me.Need))
	p := compile(t, g, c, opts)
	assert.LessOrEqual(t, p.Stages[0].MemoryBytes, opts.MemoryPerDevice)
	opts.MemoryPerDevice--
	_, err = Compile(context.Background(), g, c, opts)
	require.True(t, errors.As(err, &me), "%v", err)
}

// With the micro-batch count searched, the error of a model that fits nowhere is the
// memory error that needs least, not the complaint of a count the model cannot take.
func TestAutoMicrobatchesReportsTheLeastMemory(t *testing.T) {
	g := model(t, "moe-tiny") // batch 8 in groups of 4: 4 and 8 micro-batches cannot be made
	_, err := Compile(context.Background(), g, cluster(t, "cpu:2"), Options{MemoryPerDevice: 1024, Layers: 2})
	var me *dp.MemoryError
	require.True(t, errors.As(err, &me), "%v", err)
	for _, b := range []int{1, 2} {
		_, err := Compile(context.Background(), g, cluster(t, "cpu:2"), Options{MemoryPerDevice: 1024, Layers: 2, Microbatches: b})
		var one *dp.MemoryError
		require.True(t, errors.As(err, &one), "%v", err)
		assert.LessOrEqual(t, me.Need, one.Need)
	}
}
