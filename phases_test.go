package autopar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

func TestPhasesTable(t *testing.T) {
	assert.True(t, checkEveryPhase, "tests verify after every phase (TestMain)")
	require.NoError(t, checkPhases(Phases))
	assert.Equal(t, []string{"verify", "rebatch", "precision", "autodiff", "optimizer", "cluster", "search", "lower"}, PhaseNames())
	p, ok := LookupPhase("optimizer")
	require.True(t, ok)
	assert.Equal(t, []string{"autodiff"}, p.Requires)
	_, ok = LookupPhase("nope")
	assert.False(t, ok)
}

func TestCheckPhasesRejectsBadTables(t *testing.T) {
	run := func(*Compilation) error { return nil }
	dump := func(_ io.Writer, _ *Compilation) error { return nil }
	row := func(name string, scope Scope, requires ...string) Phase {
		return Phase{Name: name, Scope: scope, Requires: requires, Run: run, Dump: dump, Verify: run}
	}
	for _, tc := range []struct {
		table []Phase
		want  string
	}{
		{[]Phase{row("a", ForwardGraph), row("a", ForwardGraph)}, "phase a is listed twice"},
		{[]Phase{row("b", ForwardGraph, "a"), row("a", ForwardGraph)}, "phase b requires a, which does not come before it"},
		{[]Phase{{Name: "a", Run: run, Dump: dump}}, `phase "a" lacks a name, a function (Run, or RunAll in scope AllMicrobatches), a dump or a verifier`},
		{[]Phase{row("a", AllMicrobatches)}, `phase "a" lacks a name, a function (Run, or RunAll in scope AllMicrobatches), a dump or a verifier`},
		{[]Phase{row("a", Chosen), row("b", PerMicrobatches)}, "phase a runs on fewer compilations than b before it"},
	} {
		err := checkPhases(tc.table)
		require.Error(t, err)
		assert.Equal(t, tc.want, err.Error())
	}
}

// Run with every row, verifying after each: every phase runs, in table order, once per
// micro-batch count or once; the plan is Compile's and the programs are Plan.Programs'.
func TestRunRunsEveryPhase(t *testing.T) {
	g, c := model(t, "mlp-tiny"), cluster(t, "cpu:2")
	var ran []string
	cfg := &PhaseConfig{Check: true, After: func(p *Phase, s *Compilation, took time.Duration) error {
		assert.GreaterOrEqual(t, took, time.Duration(0))
		ran = append(ran, p.Name)
		if p.Scope == PerMicrobatches || p.Scope == AllMicrobatches {
			assert.Positive(t, s.Microbatches, p.Name)
		}
		return nil
	}}
	s, err := Run(context.Background(), g, c, Options{Microbatches: 2}, cfg)
	require.NoError(t, err)
	assert.Equal(t, PhaseNames(), ran)
	require.NotNil(t, s.Search)
	assert.Len(t, s.Search.Stages, len(s.Plan.Stages))

	var a, b bytes.Buffer
	require.NoError(t, s.Plan.WriteJSON(&a))
	require.NoError(t, compile(t, g, c, Options{Microbatches: 2}).WriteJSON(&b))
	assert.Equal(t, b.String(), a.String(), "Run's plan is Compile's")
	progs, err := s.Plan.Programs()
	require.NoError(t, err)
	require.Len(t, s.Programs, len(progs))
	for i := range progs {
		assert.Equal(t, progs[i].String(), s.Programs[i].String(), "the lower phase is Plan.Programs")
	}

	ran = nil
	s, err = Run(context.Background(), g, c, Options{}, cfg)
	require.NoError(t, err)
	counts, err := microbatchCounts(16, 0)
	require.NoError(t, err)
	skipped := int(s.shared.skipped.Load())
	assert.Less(t, skipped, len(counts), "the best count is never skipped")
	assert.Len(t, ran, 1+5*len(counts)+len(counts)-skipped+1,
		"verify once, rebatch to cluster once per count of %v, search once per count not skipped (%d skipped), lower once: %v", counts, skipped, ran)
}

// Each phase's dump says what it produced; the graph dumps parse back to the graph.
func TestRunUpToDumpsEachPhase(t *testing.T) {
	g, c := model(t, "mlp-tiny"), cluster(t, "cpu:2")
	for _, p := range Phases {
		var out bytes.Buffer
		cfg := &PhaseConfig{UpTo: p.Name, Check: true, After: func(q *Phase, s *Compilation, _ time.Duration) error {
			if q.Name == p.Name {
				return q.Dump(&out, s)
			}
			return nil
		}}
		s, err := Run(context.Background(), g, c, Options{Microbatches: 2}, cfg)
		require.NoError(t, err, p.Name)
		text := out.String()
		switch p.Name {
		case "verify", "rebatch", "precision", "autodiff", "optimizer":
			back, err := frontend.Parse("dump.ir", []byte(text))
			require.NoError(t, err, p.Name)
			assert.Equal(t, text, back.String(), p.Name)
		case "cluster":
			assert.Contains(t, text, "layer 0: ")
			assert.Contains(t, text, "\nl0.fc.w 0\n")
		case "search":
			assert.Contains(t, text, "# 2 micro-batches (1f1b): step time ")
			assert.Contains(t, text, "stage 0: layers 0-")
		case "lower":
			assert.Contains(t, text, "device 0\n")
			assert.Contains(t, text, "device 1\n")
		}
		if p.Name != "lower" {
			assert.Nil(t, s.Programs, "Run stops after %s", p.Name)
		}
		if p.Scope == PerMicrobatches && p.Name != "search" {
			assert.Nil(t, s.Plan, "Run stops after %s", p.Name)
		}
	}
	_, err := Run(context.Background(), g, c, Options{}, &PhaseConfig{UpTo: "autodif"})
	require.Error(t, err)
	assert.Equal(t, `unknown phase "autodif", want one of verify, rebatch, precision, autodiff, optimizer, cluster, search, lower`, err.Error())
}

// A phase that leaves a broken result is caught by its verifier, by name, when Check is on.
func TestVerifierRunsBetweenPhases(t *testing.T) {
	g, c := model(t, "mlp-tiny"), cluster(t, "cpu:2")
	rebatch, _ := LookupPhase("rebatch")
	broken := *rebatch
	broken.Run = func(s *Compilation) error {
		if err := runRebatch(s); err != nil {
			return err
		}
		s.MicroBatch = s.MicroBatch.Clone()
		s.MicroBatch.Values[len(s.MicroBatch.Values)-1].Type.Shape = ir.Shape{7}
		return nil
	}
	table := []Phase{Phases[0], broken}
	base, _, err := prepare(context.Background(), g, c, Options{})
	require.NoError(t, err)
	base.Microbatches = 2
	var seen []string
	cfg := &PhaseConfig{Check: true, After: func(p *Phase, _ *Compilation, _ time.Duration) error {
		seen = append(seen, p.Name)
		return nil
	}}
	r := &runner{table: table, cfg: cfg, last: len(table) - 1}
	err = r.run(base, PerMicrobatches)
	require.Error(t, err)
	var pe *PhaseError
	require.True(t, errors.As(err, &pe))
	assert.Equal(t, "rebatch", pe.Phase)
	assert.Regexp(t, `^rebatch: left an invalid result: testdata/models/mlp-tiny.ir:\d+:\d+: loss: type is f32\[7\]`, err.Error())
	assert.Empty(t, seen, "After sees only the phases that passed their verifier")

	cfg.Check = false
	require.NoError(t, r.run(base, PerMicrobatches), "without Check nothing verifies between phases")
}

// TestDefaultLayers: the automatic layer count is at least the devices and at least the
// model's marked blocks, up to 8, so that one device still has block boundaries to
// recompute at (gpt-350m's 24 blocks on one V100: 8 layers, not 1).
func TestDefaultLayers(t *testing.T) {
	for _, tc := range []struct {
		model   string
		devices int
		want    int
	}{
		{"gpt-tiny", 1, 2}, {"gpt-tiny", 4, 4}, {"gpt-tiny", 64, 8},
		{"wresnet-tiny", 1, 4}, {"wresnet-tiny", 8, 8}, // 4 residual blocks
		{"wresnet-500m", 2, 8}, {"wresnet-13b", 64, 8},
		{"moe-380m", 1, 8}, {"gpt-350m", 1, 8}, {"gpt-350m", 2, 8}, {"gpt-350m", 64, 8},
	} {
		assert.Equal(t, tc.want, DefaultLayers(model(t, tc.model), tc.devices), "%s on %d devices", tc.model, tc.devices)
	}
	// The cluster phase uses it when Options.Layers is 0.
	s, err := Run(context.Background(), model(t, "gpt-tiny"), cluster(t, "cpu:1"), Options{Microbatches: 1}, &PhaseConfig{UpTo: "cluster"})
	require.NoError(t, err)
	assert.Equal(t, 2, s.Layering.L)
}
