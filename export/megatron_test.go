package export

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
)

// block is one stage of a small GPT-like model on an (n0, n1) mesh holding blocks
// transformer blocks: the specs are given in Alpa's notation by the caller.
type blockSpecs struct {
	tokens, w1, w2, ln, state string
}

func gptStage(n0, n1, first, blocks int, sp blockSpecs) Stage {
	s := Stage{FirstLayer: first, LastLayer: first + blocks - 1, Mesh: [2]int{n0, n1}}
	for d := range n0 * n1 {
		s.Devices = append(s.Devices, first*n0*n1+d)
	}
	add := func(name, op string, role Role, shape []int, spec string, users ...string) {
		bd := -1
		if role == Input {
			bd = 0
		}
		s.Values = append(s.Values, Value{Name: name, Op: op, Role: role, DType: "f32", Shape: shape, BatchDim: bd, Spec: mesh.MustParseSpec(spec), Users: users})
	}
	if first == 0 {
		add("tokens", "input", Input, []int{8, 16}, sp.tokens)
		add("wte", "param", Param, []int{64, 32}, "RR", "gather", "einsum")
		add("wpe", "param", Param, []int{16, 32}, "RR", "gather")
	}
	for b := range blocks {
		add("w1", "param", Param, []int{32, 128}, sp.w1, "einsum")
		add("w2", "param", Param, []int{128, 32}, sp.w2, "einsum")
		add("gamma", "param", Param, []int{32}, "R")
		add("w1.m", "state", State, []int{32, 128}, sp.state)
		add("ln", "layer_norm", Activation, []int{2, 16, 32}, sp.ln)
		add("probs", "softmax", Activation, []int{2, 4, 16, 16}, "S0RRR")
		_ = b
	}
	return s
}

var megatronBase = blockSpecs{tokens: "S0R", w1: "RS1", w2: "S1R", ln: "S0RR", state: "RS1"}

func megatronPlan(stages ...Stage) *Plan {
	return &Plan{Model: "gpt", Batch: 8, Microbatches: 2, Schedule: "1f1b", Optimizer: Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}, Stages: stages}
}

func megatronText(t *testing.T, p *Plan) (string, error) {
	t.Helper()
	var b bytes.Buffer
	err := Write(&b, p, Megatron)
	if err != nil {
		require.ErrorIs(t, err, ErrNotMegatron)
		assert.Zero(t, b.Len())
	}
	return b.String(), err
}

func TestMegatronExpressible(t *testing.T) {
	with := func(f func(*blockSpecs)) blockSpecs { s := megatronBase; f(&s); return s }
	for _, c := range []struct {
		name   string
		plan   *Plan
		want   []string
		absent []string
	}{
		{"dp2-tp2-pp2", megatronPlan(gptStage(2, 2, 0, 1, megatronBase), gptStage(2, 2, 1, 1, megatronBase)),
			[]string{"--tensor-model-parallel-size 2\n", "--pipeline-model-parallel-size 2\n", "--micro-batch-size 2\n",
				"--global-batch-size 8\n", "--num-layers 2\n", "--hidden-size 32\n", "--num-attention-heads 4\n",
				"--seq-length 16\n", "--ffn-hidden-size 128\n", "--position-embedding-type learned_absolute\n",
				"--optimizer adam\n", "--adam-beta2 0.95\n", "world size 8 = tensor 2 × pipeline 2 × data 2", "# vocabulary: 64 entries"},
			[]string{"--sequence-parallel", "--use-distributed-optimizer", "--untie", "--recompute"}},
		{"recomputing", func() *Plan {
			p := megatronPlan(gptStage(2, 2, 0, 1, megatronBase), gptStage(2, 2, 1, 1, megatronBase))
			for i := range p.Stages {
				p.Stages[i].Recompute, p.Stages[i].RecomputeLayers = true, true
			}
			return p
		}(), []string{"--recompute-granularity full\n", "--recompute-method uniform\n", "--recompute-num-layers 1\n"}, []string{"note: the plan recomputes"}},
		{"recomputing whole stages", func() *Plan {
			p := megatronPlan(gptStage(2, 2, 0, 2, megatronBase))
			p.Stages[0].Recompute = true
			return p
		}(), []string{"--recompute-method uniform\n", "--recompute-num-layers 2\n"}, []string{"note: the plan recomputes"}},
		{"recomputing one stage", func() *Plan {
			p := megatronPlan(gptStage(2, 2, 0, 1, megatronBase), gptStage(2, 2, 1, 1, megatronBase))
			p.Stages[0].Recompute = true
			return p
		}(), []string{"--recompute-granularity full\n", "# note: the plan recomputes the activations of stage 0, not all alike; Megatron-LM recomputes every stage as stage 0 does"}, nil},
		{"untied output layer", func() *Plan {
			p := megatronPlan(gptStage(2, 2, 0, 1, megatronBase))
			p.Stages[0].Values[1].Users = []string{"gather"}
			p.Stages[0].Values = append(p.Stages[0].Values, Value{Name: "head", Op: "param", Role: Param, DType: "f32",
				Shape: []int{32, 64}, BatchDim: -1, Spec: mesh.MustParseSpec("RS1"), Users: []string{"einsum"}})
			return p
		}(), []string{"--untie-embeddings-and-output-weights\n", "--ffn-hidden-size 128\n", "# vocabulary: 64 entries"}, nil},
		{"sequence parallel", megatronPlan(gptStage(2, 2, 0, 2, with(func(s *blockSpecs) { s.ln = "S0S1R" }))),
			[]string{"--sequence-parallel\n", "--tensor-model-parallel-size 2\n", "--num-layers 2\n"}, nil},
		{"S01 weights: one group of four", megatronPlan(gptStage(2, 2, 0, 1, blockSpecs{tokens: "RR", w1: "RS01", w2: "S01R", ln: "RRR", state: "RS01"})),
			[]string{"--tensor-model-parallel-size 4\n", "--micro-batch-size 4\n", "data 1"}, nil},
		{"distributed optimizer", megatronPlan(gptStage(2, 2, 0, 1, with(func(s *blockSpecs) { s.state = "S0S1" }))),
			[]string{"--use-distributed-optimizer\n"}, nil},
		{"tokens split over the whole mesh", megatronPlan(gptStage(2, 2, 0, 1, with(func(s *blockSpecs) { s.tokens = "S01R" }))),
			[]string{"--tensor-model-parallel-size 2\n", "note: stage 0 splits input tokens (S01R) along the batch over the tensor-parallel group too"}, nil},
		{"axes of one device are no split", megatronPlan(gptStage(1, 4, 0, 1, blockSpecs{tokens: "S0R", w1: "RS1", w2: "S1R", ln: "S0RR", state: "S0S1"})),
			[]string{"--tensor-model-parallel-size 4\n"}, []string{"--use-distributed-optimizer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := megatronText(t, c.plan)
			require.NoError(t, err)
			for _, w := range c.want {
				assert.Contains(t, got, w)
			}
			for _, w := range c.absent {
				assert.NotContains(t, got, w)
			}
		})
	}
}

// TestMegatronNotExpressible lists what Megatron cannot run; the error names every
// reason, not the first only.
func TestMegatronNotExpressible(t *testing.T) {
	with := func(f func(*blockSpecs)) blockSpecs { s := megatronBase; f(&s); return s }
	expert := gptStage(2, 2, 0, 1, megatronBase)
	expert.Values = append(expert.Values, Value{Name: "moe.wi", Op: "param", Role: Param, DType: "f32", Shape: []int{4, 32, 128}, BatchDim: -1, Spec: mesh.MustParseSpec("S1RR")})
	noAttention := gptStage(2, 2, 0, 1, megatronBase)
	noAttention.Values = noAttention.Values[:len(noAttention.Values)-1]
	for _, c := range []struct {
		name string
		plan *Plan
		want []string
	}{
		{"weight on both axes", megatronPlan(gptStage(2, 2, 0, 1, with(func(s *blockSpecs) { s.w1 = "S0S1" }))),
			[]string{"param w1 is S0S1, split on 2 dims: Megatron splits a weight along one dim"}},
		{"weights on different axes", megatronPlan(gptStage(2, 2, 0, 1, with(func(s *blockSpecs) { s.w2 = "S0R" }))),
			[]string{"param w2 is S0R but w1 is RS1: Megatron has one tensor-parallel group"}},
		{"tensor parallel on the slow axis", megatronPlan(gptStage(2, 2, 0, 1, blockSpecs{tokens: "S1R", w1: "RS0", w2: "S0R", ln: "S1RR", state: "RS0"})),
			[]string{"stage 0 splits weights on mesh axis 0 of (2, 2) and data on axis 1"}},
		{"data not split over the data-parallel axis", megatronPlan(gptStage(2, 2, 0, 1, with(func(s *blockSpecs) { s.tokens = "RR" }))),
			[]string{"input tokens is RR: Megatron splits the batch (dim 0) over the data-parallel axes 0"}},
		{"layer norm split on the hidden dim", megatronPlan(gptStage(2, 2, 0, 1, with(func(s *blockSpecs) { s.ln = "S0RS1" }))),
			[]string{"layer norm ln is S0RS1: Megatron keeps layer norms whole or, with --sequence-parallel, splits them along the sequence"}},
		{"uneven stages", megatronPlan(gptStage(2, 2, 0, 2, megatronBase), gptStage(1, 2, 2, 1, with(func(s *blockSpecs) { s.ln = "RRR" }))),
			[]string{"stage 1 has 2 devices and stage 0 has 4", "the stages hold 2, 1 transformer blocks"}},
		{"different tensor-parallel sizes", megatronPlan(gptStage(2, 2, 0, 1, megatronBase), gptStage(2, 2, 1, 1, blockSpecs{tokens: "RR", w1: "RS01", w2: "S01R", ln: "RRR", state: "RS01"})),
			[]string{"stage 1 is tensor 4 × data 1 and stage 0 is tensor 2 × data 2"}},
		{"expert weights", megatronPlan(expert), []string{"param moe.wi is f32[4,32,128], not a matrix"}},
		{"no attention", megatronPlan(noAttention), []string{"model gpt has no attention"}},
		{"two MLP widths", func() *Plan {
			p := megatronPlan(gptStage(2, 2, 0, 1, megatronBase))
			p.Stages[0].Values = append(p.Stages[0].Values, Value{Name: "w3", Op: "param", Role: Param, DType: "f32",
				Shape: []int{32, 80}, BatchDim: -1, Spec: mesh.MustParseSpec("RS1"), Users: []string{"matmul"}})
			return p
		}(), []string{"the weights have the widths 80, 128 besides the hidden size 32"}},
		{"micro-batch does not divide", func() *Plan {
			p := megatronPlan(gptStage(2, 2, 0, 1, megatronBase))
			p.Microbatches = 8
			return p
		}(), []string{"a micro-batch of 1 samples does not divide among 2 data-parallel ranks"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := megatronText(t, c.plan)
			require.Error(t, err)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Equal(t, len(c.want), strings.Count(err.Error(), "\n  - "), "one line per reason: %v", err)
		})
	}
}

func TestValidate(t *testing.T) {
	p := megatronPlan(gptStage(2, 2, 0, 1, megatronBase))
	p.Stages[0].Values[1].Spec = mesh.MustParseSpec("RRR")
	err := Write(&bytes.Buffer{}, p, JAX)
	assert.EqualError(t, err, `export: stage 0: value wte is f32[64,32] but its spec "RRR" has 3 dims`)

	p = megatronPlan(gptStage(2, 2, 0, 1, megatronBase))
	p.Stages[0].Devices = p.Stages[0].Devices[:3]
	assert.EqualError(t, Write(&bytes.Buffer{}, p, DTensor), "export: stage 0: logical mesh (2, 2) over 3 devices")

	_, err = ParseFormat("onnx")
	assert.EqualError(t, err, `export: unknown format "onnx", expected one of jax, dtensor, megatron`)
}
