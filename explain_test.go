package autopar

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/passes"
)

// explainCase is a small compiled plan and a value to explain in it.
type explainCase struct {
	name, model, cluster, value string
	opts                        Options
	why                         Why // "" when any reason will do
}

const flatCPU4 = "testdata/clusters/cpu4-flat.json"

var explainCases = []explainCase{
	{"mlp/pipeline", "mlp-tiny", "cpu:4", "l1.fc.matmul", Options{Microbatches: 2}, ""},
	{"mlp/param", "mlp-tiny", "cpu:2", "l0.fc.w", Options{Microbatches: 1}, WhyCheapest},
	// The tied and memory cases need plans whose choices are close calls under FLOP-only
	// prices (testdata/clusters/cpu4-flat.json; see fusedqkv_test.go's flatCluster).
	{"mlp/tied follower", "mlp-tiny", flatCPU4, "grad.l1.fc.b", Options{Microbatches: 2, Manual: &Manual{TP: 2, PP: 1, DP: 2}}, WhyTied},
	{"mlp/memory", "mlp-tiny", flatCPU4, "logits.matmul",
		Options{Microbatches: 1, Manual: &Manual{TP: 4, PP: 1, DP: 1}, MemoryPerDevice: 8500}, WhyMemory},
	{"gpt/attention", "gpt-tiny", "cpu:2", "l1.attn.scores", Options{Microbatches: 2, Layers: 2}, ""},
}

func TestExplainOp(t *testing.T) {
	for _, tc := range explainCases {
		t.Run(tc.name, func(t *testing.T) {
			p := compile(t, model(t, tc.model), cluster(t, tc.cluster), tc.opts)
			e, err := p.ExplainOp(context.Background(), tc.value)
			require.NoError(t, err)
			si, vp := p.findValue(tc.value)
			assert.Equal(t, si, e.Stage)

			chosen := 0
			for k, c := range e.Candidates {
				assert.Equal(t, k, c.Index)
				assert.InDelta(t, c.Compute+c.Comm+c.ReshardIn+c.ReshardOut, c.Total, 1e-15, "candidate %d total", k)
				assert.GreaterOrEqual(t, c.Total*(1+1e-9), e.Candidates[e.Cheapest].Total, "candidate %d below the cheapest", k)
				if c.Chosen {
					chosen++
				}
			}
			require.Equal(t, 1, chosen, "exactly one candidate is marked chosen")
			c := e.Candidates[e.Chosen]
			assert.True(t, c.Chosen)
			assert.Equal(t, vp.Strategy, c.Name, "the plan's strategy is the chosen candidate")
			assert.True(t, c.Out.Equal(vp.Spec))
			assert.InDelta(t, vp.Compute, c.Compute, 1e-15)
			assert.InDelta(t, vp.Comm, c.Comm, 1e-15)
			assert.InDelta(t, p.Stages[si].Cost.Total, e.StageCost, 1e-9*e.StageCost, "the re-solve costs what compile found")
			assert.Empty(t, e.Notes, "the re-solve agrees with plan.json")
			assert.NotEmpty(t, e.Reason)
			if tc.why != "" {
				assert.Equal(t, tc.why, e.Why, e.Reason)
			}
			if e.Why == WhyCheapest {
				assert.InDelta(t, e.Candidates[e.Cheapest].Total, c.Total, 1e-9*c.Total+1e-15)
			}
		})
	}
}

// The reasons other than "cheapest" rest on the solves they quote.
func TestExplainOpReasonFacts(t *testing.T) {
	ctx := context.Background()
	g, c := model(t, "mlp-tiny"), cluster(t, flatCPU4)

	p := compile(t, g, c, Options{Microbatches: 2, Manual: &Manual{TP: 2, PP: 1, DP: 2}})
	e, err := p.ExplainOp(ctx, "grad.l1.fc.b")
	require.NoError(t, err)
	require.Equal(t, WhyTied, e.Why)
	require.NotNil(t, e.Forced)
	assert.Equal(t, e.Cheapest, e.Forced.Candidate)
	assert.True(t, e.Forced.Fits)
	assert.LessOrEqual(t, e.Forced.StageCost, e.StageCost*(1+1e-9), "tied: forcing the cheaper one costs no more")
	assert.Less(t, e.Candidates[e.Cheapest].Total, e.Candidates[e.Chosen].Total)

	p = compile(t, g, c, Options{Microbatches: 1, Manual: &Manual{TP: 4, PP: 1, DP: 1}, MemoryPerDevice: 8500})
	e, err = p.ExplainOp(ctx, "logits.matmul")
	require.NoError(t, err)
	require.Equal(t, WhyMemory, e.Why)
	assert.Less(t, e.UnbudgetedCost, e.StageCost, "without the budget the stage is cheaper")
	assert.False(t, e.UnbudgetedSpec.Equal(e.Candidates[e.Chosen].Out), "and the value laid out otherwise")
	assert.Contains(t, e.Reason, "memory budget")
}

// Every value of a stage explained: the chosen candidates' compute and communication add
// up to the stage's, so the candidates are the ones the ILP priced.
func TestExplainOpSumsToStage(t *testing.T) {
	p := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:2"), Options{Microbatches: 1})
	for si, s := range p.Stages {
		var compute, comm float64
		for _, v := range s.Values {
			e, err := p.ExplainOp(context.Background(), v.Name)
			require.NoError(t, err, v.Name)
			if e.Stage != si {
				continue // a leaf another stage holds
			}
			compute += e.Candidates[e.Chosen].Compute
			comm += e.Candidates[e.Chosen].Comm
		}
		assert.InDelta(t, s.Cost.Compute, compute, 1e-9*s.Cost.Compute, "stage %d compute", si)
		assert.InDelta(t, s.Cost.Communication, comm, 1e-9*s.Cost.Communication+1e-15, "stage %d communication", si)
	}
}

func TestExplainErrors(t *testing.T) {
	ctx := context.Background()
	p := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:4"), Options{Microbatches: 2})
	n := len(dedupStrings(p.StageNames()))
	cases := []struct {
		name string
		run  func() error
		want []string
	}{
		{"typo", func() error { _, err := p.ExplainOp(ctx, "l1.fc.matmull"); return err },
			[]string{`no value "l1.fc.matmull"`, "closest: l1.fc.matmul, ", "values)"}},
		{"count", func() error { _, err := p.ExplainOp(ctx, "nothing-like-it"); return err },
			[]string{"(" + strconv.Itoa(n) + " values)"}},
		{"stage", func() error { _, err := p.ExplainStage(ctx, len(p.Stages)); return err },
			[]string{"no stage " + strconv.Itoa(len(p.Stages)), "0 (layers 0-"}},
		{"negative stage", func() error { _, err := p.ExplainStage(ctx, -1); return err }, []string{"no stage -1"}},
		{"no step", func() error { _, err := (&Plan{}).ExplainOp(ctx, "x"); return err }, []string{"no training step"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Equal(t, strings.ToLower(err.Error()[:1]), err.Error()[:1], "errors are lowercase")
		})
	}
	// The nearest name comes first.
	_, err := p.ExplainOp(ctx, "l1.fc.matmull")
	assert.Contains(t, err.Error(), "closest: l1.fc.matmul,")
}

func TestExplainStage(t *testing.T) {
	cases := []struct {
		model, cluster string
		opts           Options
	}{
		{"mlp-tiny", "cpu:4", Options{Microbatches: 2}},
		{"gpt-tiny", "cpu:2", Options{Microbatches: 2, Layers: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.model+"/"+tc.cluster, func(t *testing.T) {
			c := cluster(t, tc.cluster)
			p := compile(t, model(t, tc.model), c, tc.opts)
			dc := dp.ClusterOf(c)
			for si, s := range p.Stages {
				// Every submesh and logical mesh but the mirrors (n, 1) inside a host.
				shapes := 0
				for _, sub := range dp.Submeshes(dc) {
					for _, l := range dp.LogicalShapes(sub) {
						mirror := sub.Hosts == 1 && l[0] > 1 && l[1] == 1
						if !mirror || s.Logical == l && s.Submesh.Devices == sub.Devices {
							shapes++
						}
					}
				}
				e, err := p.ExplainStage(context.Background(), si)
				require.NoError(t, err)
				assert.Equal(t, s.FirstLayer, e.FirstLayer)
				assert.Equal(t, s.LastLayer, e.LastLayer)
				require.Len(t, e.Alternatives, shapes)
				assert.InDelta(t, p.Predicted.StepTime, e.StepTime, 1e-9*e.StepTime)
				marked := 0
				for _, a := range e.Alternatives {
					if a.Chosen {
						marked++
					}
					if a.OK {
						assert.Equal(t, a.WeightBytes+int64(e.InFlight)*a.ActBytes+a.RecomputeBytes, a.MemoryBytes)
						assert.Equal(t, a.MemoryBytes <= e.Capacity, a.Fits)
						assert.InDelta(t, a.Time+a.Step, a.Cost.Total, 1e-12)
					}
					if a.Devices == len(s.Devices) && a.OK {
						assert.GreaterOrEqual(t, a.StepTime, p.Predicted.StepTime*(1-1e-9), "the DP found nothing better")
					}
				}
				require.Equal(t, 1, marked)
				ch := e.Alternatives[e.Chosen]
				assert.True(t, ch.Chosen && ch.OK && ch.Fits)
				assert.Equal(t, s.Submesh, ch.Submesh)
				assert.Equal(t, s.Logical, ch.Logical)
				assert.InDelta(t, s.Time, ch.Time, 1e-9*s.Time)
				assert.Equal(t, s.WeightBytes, ch.WeightBytes)
				assert.Equal(t, s.ActBytes, ch.ActBytes)
				assert.Equal(t, s.MemoryBytes, ch.MemoryBytes)
			}
		})
	}
}

func TestMemoryBreakdown(t *testing.T) {
	c := cluster(t, "cpu:4")
	for _, opts := range []Options{{Microbatches: 2}, {Microbatches: 4, Optimizer: adam()}} {
		p := compile(t, model(t, "mlp-tiny"), c, opts)
		rows := p.MemoryBreakdown()
		require.Len(t, rows, c.Devices(), "one row per device")
		for i, r := range rows {
			assert.Equal(t, i, r.Device, "sorted by device")
			s := p.Stages[r.Stage]
			assert.Contains(t, s.Devices, r.Device)
			assert.Equal(t, r.Weights, r.Gradients, "one gradient accumulator per param")
			assert.Equal(t, s.WeightBytes, r.Weights+r.Gradients+r.Optimizer)
			assert.Equal(t, s.ActBytes*int64(s.InFlight), r.Activations)
			assert.Equal(t, s.MemoryBytes, r.Total)
			assert.Equal(t, p.Predicted.DeviceMemory, r.Capacity)
			assert.Positive(t, r.Weights)
			// A stage may read params another stage updates (a backward op clustered with
			// the layer it feeds), and the state is sharded on its own (ZeRO-style plans
			// shard it where the params are replicated): at most the moments of its params.
			moments := int64(1)
			if opts.Optimizer.Kind == "adam" {
				moments = 2
			}
			assert.Positive(t, r.Optimizer)
			assert.LessOrEqual(t, r.Optimizer, moments*r.Weights+4, "adam also keeps its step counter adam.t")
		}
		var buf bytes.Buffer
		require.NoError(t, p.WriteJSON(&buf))
		q, err := ReadPlan(&buf)
		require.NoError(t, err)
		assert.Equal(t, rows, q.MemoryBreakdown(), "the same from plan.json")
	}
}

func adam() passes.Optimizer { return passes.Optimizer{Kind: "adam", LR: 0.01} }

// ReadPlan refuses a hand-edited plan.json whose layouts nothing can hold.
func TestReadPlanChecksLayouts(t *testing.T) {
	p := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:2"), Options{Microbatches: 1, Manual: &Manual{TP: 1, PP: 1, DP: 2}}) // one stage on both devices
	var buf bytes.Buffer
	require.NoError(t, p.WriteJSON(&buf))
	// A submesh of three devices where the plan lists two: a hand edit that still parses.
	bad := strings.Replace(buf.String(), `"submesh": {
        "hosts": 1,
        "devices": 2
      },`, `"submesh": {
        "hosts": 1,
        "devices": 3
      },`, 1)
	require.NotEqual(t, buf.String(), bad)
	_, err := ReadPlan(strings.NewReader(bad))
	require.ErrorContains(t, err, "plan: stage 0: submesh 1x3 does not fit cluster cpu: 1 hosts × 2 devices")
	noDevices := strings.Replace(buf.String(), `"devices": [
        0,
        1
      ],`, `"devices": [],`, 1)
	require.NotEqual(t, buf.String(), noDevices)
	_, err = ReadPlan(strings.NewReader(noDevices))
	require.ErrorContains(t, err, "lists 0 devices")
	twice := strings.Replace(buf.String(), `"spec": "RR"`, `"spec": "S1S1"`, 1)
	require.NotEqual(t, buf.String(), twice)
	_, err = ReadPlan(strings.NewReader(twice))
	require.ErrorContains(t, err, "reuses a mesh axis")
}

// BenchmarkExplain times the three questions on compiled plans: an op (one re-solve of its
// stage plus one without a memory budget, two more when the ILP traded it), a stage (one
// solve per submesh and logical mesh) and the memory breakdown (no solve).
func BenchmarkExplain(b *testing.B) {
	cases := []struct {
		model, cluster, op string
		opts               Options
	}{
		{"mlp-tiny", "cpu:4", "l1.fc.matmul", Options{Microbatches: 2}},
		{"gpt-tiny", "cpu:4", "l1.attn.scores", Options{Microbatches: 2, Layers: 2}},
	}
	ctx := context.Background()
	for _, tc := range cases {
		p := compile(b, model(b, tc.model), cluster(b, tc.cluster), tc.opts)
		b.Run(tc.model+"/op", func(b *testing.B) {
			for b.Loop() {
				if _, err := p.ExplainOp(ctx, tc.op); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.model+"/stage", func(b *testing.B) {
			for b.Loop() {
				if _, err := p.ExplainStage(ctx, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.model+"/memory", func(b *testing.B) {
			for b.Loop() {
				p.MemoryBreakdown()
			}
		})
	}
}

// Meshes whose weights alone overflow the memory several times are not solved, as in
// compile: they are listed as pruned, with lower bounds, and never fit.
func TestExplainStagePruned(t *testing.T) {
	p := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:4"), Options{Microbatches: 1, Layers: 1})
	require.Len(t, p.Stages, 1)
	p.Predicted.DeviceMemory = 2000 // as if compiled for 2000 bytes: the whole model needs ~19 KiB
	e, err := p.ExplainStage(context.Background(), 0)
	require.NoError(t, err)
	pruned, solved := 0, 0
	for _, a := range e.Alternatives {
		switch {
		case a.Pruned:
			pruned++
			assert.False(t, a.Fits)
			assert.Greater(t, a.WeightBytes, int64(pruneFactor)*2000)
			assert.Zero(t, a.Cost.Total)
		case a.OK:
			solved++
		}
	}
	assert.Positive(t, pruned, "the one-device mesh holds all the weights")
	assert.Positive(t, solved, "four devices share them")
}
