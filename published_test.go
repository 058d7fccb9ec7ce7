package autopar

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// publishedFile holds published training runs of well-known systems, each row with its
// source (testdata/published/README.md).
const publishedFile = "testdata/published/runs.json"

// publishedAllFlag makes TestPublishedFits80GB check every SC'21 row, not only the
// smallest (all of them take minutes on the 2-core machine; BenchmarkPublished runs them
// all).
var publishedAllFlag = flag.Bool("published-all", false, "TestPublishedFits80GB: check every SC'21 row of "+publishedFile+", not only the fast ones")

// publishedClusterFlag prices BenchmarkPublished's rows on a cluster JSON instead of each
// row's preset (its host count is set to the row's): a what-if, e.g.
// testdata/published/dgx-a100-fused-proxy.json.
var publishedClusterFlag = flag.String("published-cluster", "", "BenchmarkPublished: price every row on this cluster JSON (hosts set per row) instead of its preset")

// publishedRun is one row of runs.json. Fields the benchmark does not read are kept as
// text so that a misspelt field is an error (DisallowUnknownFields), not a silent zero.
type publishedRun struct {
	ID           string `json:"id"`
	System       string `json:"system"`
	Source       string `json:"source"`
	ConfigSource string `json:"config_source"`
	Model        struct {
		Arch          string  `json:"arch"`
		ParamsBillion float64 `json:"params_billion"`
		Layers        int     `json:"layers"`
		Hidden        int     `json:"hidden"`
		Heads         int     `json:"heads"`
		Seq           int     `json:"seq"`
		Vocab         int     `json:"vocab"`
		FFN           int     `json:"ffn"`
		Tied          bool    `json:"tied_embeddings"`
	} `json:"model"`
	Cluster struct {
		GPU         string  `json:"gpu"`
		PeakTFLOPS  float64 `json:"peak_tflops"`
		GPUs        int     `json:"gpus"`
		GPUsPerHost int     `json:"gpus_per_host"`
		Hosts       int     `json:"hosts"`
		IntraHost   string  `json:"intra_host"`
		InterHost   string  `json:"inter_host"`
		Preset      string  `json:"preset"`
	} `json:"cluster"`
	Parallel struct {
		TP int `json:"tp"`
		PP int `json:"pp"`
		DP int `json:"dp"`
	} `json:"parallel"`
	GlobalBatch  int    `json:"global_batch"`
	MicroBatch   int    `json:"micro_batch"`
	Precision    string `json:"precision"`
	Recompute    string `json:"recompute"`
	Optimizer    string `json:"optimizer"`
	Schedule     string `json:"schedule"`
	DataParallel string `json:"data_parallel"`
	Throughput   struct {
		TFLOPSPerGPU    float64 `json:"tflops_per_gpu"`
		PercentOfPeak   float64 `json:"percent_of_peak"`
		AggregatePFLOPS float64 `json:"aggregate_pflops"`
	} `json:"throughput"`
	FLOPsCounting string   `json:"flops_counting"`
	Unpublished   []string `json:"unpublished"`
}

// loadPublished reads and checks runs.json: every row's degrees use exactly its GPUs, its
// hosts hold them, and its global batch is a whole number of micro-batches per replica.
func loadPublished(tb testing.TB) []publishedRun {
	tb.Helper()
	data, err := os.ReadFile(publishedFile)
	require.NoError(tb, err)
	var doc struct {
		About string         `json:"about"`
		Runs  []publishedRun `json:"runs"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	require.NoError(tb, dec.Decode(&doc), publishedFile)
	require.NotEmpty(tb, doc.Runs)
	for _, r := range doc.Runs {
		require.NoError(tb, r.check(), "%s: row %s", publishedFile, r.ID)
	}
	return doc.Runs
}

func (r *publishedRun) check() error {
	p, c, m := r.Parallel, r.Cluster, r.Model
	switch {
	case r.ID == "" || r.Source == "":
		return fmt.Errorf("a row needs an id and a source")
	case m.Arch != "gpt":
		return fmt.Errorf("model arch %q: only gpt is built", m.Arch)
	case p.TP*p.PP*p.DP != c.GPUs:
		return fmt.Errorf("tp %d × pp %d × dp %d is not its %d GPUs", p.TP, p.PP, p.DP, c.GPUs)
	case c.Hosts*c.GPUsPerHost != c.GPUs:
		return fmt.Errorf("%d hosts × %d GPUs is not its %d GPUs", c.Hosts, c.GPUsPerHost, c.GPUs)
	case r.MicroBatch < 1 || r.GlobalBatch%(r.MicroBatch*p.DP) != 0:
		return fmt.Errorf("global batch %d is not a multiple of micro-batch %d × dp %d", r.GlobalBatch, r.MicroBatch, p.DP)
	case r.Throughput.TFLOPSPerGPU <= 0:
		return fmt.Errorf("no published throughput")
	}
	return nil
}

// sc21 tells the rows of the Megatron-LM SC'21 paper's weak-scaling table (Table 1).
func (r *publishedRun) sc21() bool { return strings.HasPrefix(r.ID, "megatron-sc21-t1-") }

// microbatches is B, autopar's micro-batch count per step: Megatron-LM's micro-batch size
// counts samples per data-parallel replica, so B = global batch / (micro-batch × dp).
func (r *publishedRun) microbatches() int {
	return r.GlobalBatch / (r.MicroBatch * r.Parallel.DP)
}

// graph builds the row's model as `autopar model gpt` does, with Megatron-LM's fused qkv
// projection and tied embeddings, in f16 (the step computes in --precision mixed). No
// dropout: see testdata/published/README.md.
func (r *publishedRun) graph() (*ir.Graph, error) {
	m := r.Model
	g := zoo.GPT{Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads, Seq: m.Seq, Vocab: m.Vocab,
		Batch: r.GlobalBatch, FFN: m.FFN, Tied: m.Tied, DType: "f16", FusedQKV: true}
	return g.Build()
}

// cluster is the row's preset with its host count, or -published-cluster's file with it.
func (r *publishedRun) cluster() (*mesh.Cluster, error) {
	if *publishedClusterFlag == "" {
		return mesh.ParseCluster(fmt.Sprintf("%s:%d", r.Cluster.Preset, r.Cluster.Hosts))
	}
	c, err := mesh.LoadCluster(*publishedClusterFlag)
	if err != nil {
		return nil, err
	}
	if c.DevicesPerHost != r.Cluster.GPUsPerHost {
		return nil, fmt.Errorf("%s has %d devices per host, row %s %d", *publishedClusterFlag, c.DevicesPerHost, r.ID, r.Cluster.GPUsPerHost)
	}
	c.Hosts = r.Cluster.Hosts
	return c, c.Validate()
}

// options is `autopar compile --plan tp=..,pp=..,dp=.. --remat full --precision mixed
// --optimizer adam --microbatches B --layers L`: one clustered layer per transformer
// block, so that full recomputation runs block by block as Megatron-LM's does.
func (r *publishedRun) options() Options {
	p := r.Parallel
	return Options{
		Optimizer:    passes.Optimizer{Kind: "adam", LR: 1e-4},
		Precision:    "mixed",
		Microbatches: r.microbatches(),
		Layers:       r.Model.Layers,
		Manual:       &Manual{TP: p.TP, PP: p.PP, DP: p.DP},
		Remat:        RematFull,
		ILPTimeLimit: 20 * time.Minute, // wall clock: the shared 2-core machine runs it at a fraction of a core
	}
}

// paperFLOPs is the SC'21 paper's Eq. 3, the FLOPs of one iteration with full
// recomputation (four forward passes' worth: 96 = 4 × 24): 96·B·s·l·h²·(1 + s/(6h) +
// V/(16·l·h)). Table 1's TFLOP/s per GPU is this over the iteration time and the GPUs;
// the benchmark divides it by the predicted step time, so both sides count alike.
func (r *publishedRun) paperFLOPs() float64 {
	m := r.Model
	b, s, l, h, v := float64(r.GlobalBatch), float64(m.Seq), float64(m.Layers), float64(m.Hidden), float64(m.Vocab)
	return 96 * b * s * l * h * h * (1 + s/(6*h) + v/(16*l*h))
}

// publishedResult is one row priced by autopar.
type publishedResult struct {
	plan                 *Plan
	predicted, published float64 // TFLOP/s per GPU, both by the paper's counting
	// maxMemory is the plan's peak on its fullest device, params gathered for the step
	// included (the sharding pass counts them).
	maxMemory int64
	// gathered is the part of maxMemory that the fullest device's stage holds in params
	// and state gathered beyond their shards (sharding.Result.Gathered).
	gathered              int64
	compile               time.Duration
	publishedStep, budget float64
}

func pricePublished(tb testing.TB, r publishedRun) publishedResult {
	tb.Helper()
	g, err := r.graph()
	require.NoError(tb, err, r.ID)
	c, err := r.cluster()
	require.NoError(tb, err, r.ID)
	start := time.Now()
	comp, err := Run(context.Background(), g, c, r.options(), &PhaseConfig{UpTo: "search"})
	require.NoError(tb, err, r.ID)
	p := comp.Plan
	res := publishedResult{plan: p, compile: time.Since(start), budget: float64(c.DeviceMemoryBytes)}
	f := r.paperFLOPs()
	gpus := float64(r.Cluster.GPUs)
	res.predicted = f / p.Predicted.StepTime / gpus / 1e12
	res.published = r.Throughput.TFLOPSPerGPU
	res.publishedStep = f / (res.published * 1e12 * gpus)
	for i, s := range p.Stages {
		if s.MemoryBytes > res.maxMemory {
			res.maxMemory, res.gathered = s.MemoryBytes, p.priced[i].res.Gathered
		}
	}
	return res
}

// TestPublishedFits80GB: the published Megatron-LM configurations of the SC'21 weak-scaling
// table, compiled with their degrees (--plan), full recomputation and mixed precision on
// dgx-a100, fit the A100's 80 GB, as they did when they ran (issue 11), by the plan's own
// peak, which counts the params a stage gathers beyond their shards. By default only
// the rows that compile in seconds here; -published-all checks every row
// (BenchmarkPublished compiles them all too).
func TestPublishedFits80GB(t *testing.T) {
	fast := []string{"megatron-sc21-t1-1.7b", "megatron-sc21-t1-18b"}
	runs := loadPublished(t)
	found := 0 // of the fast rows: each must be in the file
	for _, r := range runs {
		if slices.Contains(fast, r.ID) {
			found++
		}
		if !r.sc21() || !*publishedAllFlag && !slices.Contains(fast, r.ID) {
			continue
		}
		t.Run(r.ID, func(t *testing.T) {
			res := pricePublished(t, r)
			require.Equal(t, 80<<30, int(res.budget), "the A100 80 GB preset")
			t.Logf("%s: %.1f GiB on its fullest GPU, %.1f GiB of it params gathered beyond their shards; step %.3g s",
				r.ID, float64(res.maxMemory)/(1<<30), float64(res.gathered)/(1<<30), res.plan.Predicted.StepTime)
			require.LessOrEqual(t, res.maxMemory, int64(res.budget), "%s needs %.1f GiB on its fullest GPU",
				r.ID, float64(res.maxMemory)/(1<<30))
			for i, s := range res.plan.Stages {
				require.True(t, s.Recompute, "%s: stage %d does not recompute under --remat full", r.ID, i)
			}
		})
	}
	require.Equal(t, len(fast), found, "rows %v are in %s", fast, publishedFile)
}

// BenchmarkPublished prices every published run with its own degrees, micro-batch and
// recomputation on its preset and reports predicted and published TFLOP/s per GPU (both
// by the paper's FLOP count) and their ratio. A prediction, not a timing: ns/op is the
// compile time. go test -run '^$' -bench Published -benchtime 1x .
func BenchmarkPublished(b *testing.B) {
	for _, r := range loadPublished(b) {
		b.Run(strings.TrimPrefix(r.ID, "megatron-"), func(b *testing.B) {
			var res publishedResult
			for range b.N {
				res = pricePublished(b, r)
			}
			p := res.plan.Predicted
			b.ReportMetric(res.predicted, "pred-TFLOP/s")
			b.ReportMetric(res.published, "pub-TFLOP/s")
			b.ReportMetric(res.predicted/res.published, "pred/pub")
			b.ReportMetric(float64(res.maxMemory)/(1<<30), "GiB/GPU")
			b.ReportMetric(float64(res.gathered)/(1<<30), "gathered-GiB")
			b.Logf("%s: step %.3g s predicted (compute %.3g + communication %.3g + bubble %.3g + sync %.3g + update %.3g), %.3g s published; %.1f GiB on the fullest GPU of %d stages; compiled in %v",
				r.ID, p.StepTime, p.Compute, p.Communication, p.Bubble, p.Sync, p.Update, res.publishedStep,
				float64(res.maxMemory)/(1<<30), len(res.plan.Stages), res.compile.Round(time.Millisecond))
			if res.maxMemory > int64(res.budget) {
				b.Errorf("%s does not fit: %.1f GiB per GPU", r.ID, float64(res.maxMemory)/(1<<30))
			}
		})
	}
}
