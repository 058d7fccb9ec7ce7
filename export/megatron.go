package export

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/autopar/autopar/mesh"
)

// ErrNotMegatron is wrapped by the error of a plan Megatron-LM cannot run; the error
// lists every reason, one per line.
var ErrNotMegatron = errors.New("the plan is not expressible as Megatron-LM arguments")

// megatronConfig is a plan read as Megatron-LM's parallel configuration.
type megatronConfig struct {
	tp, pp, dp     int
	blocks         int // transformer blocks (attention softmaxes) of the model
	hidden, heads  int
	seq            int
	ffn            int  // the MLP's width; 0 when no weight tells
	vocab          int  // rows of the word embedding; 0 when there is none
	untied         bool // the output layer has its own weight, not the word embedding's
	learnedPos     bool // a learned position embedding
	microBatch     int  // per data-parallel rank
	sequenceParall bool
	distOptimizer  bool
	dtypeFlag      string
	notes          []string
}

// megatronArgs writes the launch arguments of Megatron-LM for the plan, or returns an
// error wrapping ErrNotMegatron that names everything Megatron cannot express.
func megatronArgs(p *Plan) (string, error) {
	c, reasons := readMegatron(p)
	if len(reasons) > 0 {
		return "", fmt.Errorf("export: %w:\n  - %s", ErrNotMegatron, strings.Join(reasons, "\n  - "))
	}
	var b strings.Builder
	for _, l := range header(p, "Megatron-LM launch arguments") {
		b.WriteString("# " + l + "\n")
	}
	b.WriteString("#\n# Megatron reads this plan as tensor parallel (column and row splits of the weights)\n")
	b.WriteString("# inside each stage's mesh, data parallel across it, and one pipeline stage per submesh.\n")
	for _, n := range c.notes {
		b.WriteString("# note: " + n + "\n")
	}
	args := [][2]string{
		{"--tensor-model-parallel-size", fmt.Sprint(c.tp)},
		{"--pipeline-model-parallel-size", fmt.Sprint(c.pp)},
		{"--micro-batch-size", fmt.Sprint(c.microBatch)},
		{"--global-batch-size", fmt.Sprint(p.Batch)},
		{"--num-layers", fmt.Sprint(c.blocks)},
		{"--hidden-size", fmt.Sprint(c.hidden)},
		{"--num-attention-heads", fmt.Sprint(c.heads)},
		{"--seq-length", fmt.Sprint(c.seq)},
		{"--max-position-embeddings", fmt.Sprint(c.seq)},
	}
	if c.ffn > 0 {
		args = append(args, [2]string{"--ffn-hidden-size", fmt.Sprint(c.ffn)})
	}
	if c.learnedPos {
		args = append(args, [2]string{"--position-embedding-type", "learned_absolute"})
	}
	if c.untied {
		args = append(args, [2]string{"--untie-embeddings-and-output-weights", ""})
	}
	if c.sequenceParall {
		args = append(args, [2]string{"--sequence-parallel", ""})
	}
	if c.distOptimizer {
		args = append(args, [2]string{"--use-distributed-optimizer", ""})
	}
	if c.dtypeFlag != "" {
		args = append(args, [2]string{c.dtypeFlag, ""})
	}
	args = append(args, recomputeArgs(p, &c, &b)...)
	args = append(args, optimizerArgs(p.Optimizer)...)
	if c.vocab > 0 {
		fmt.Fprintf(&b, "# vocabulary: %d entries; the tokenizer must have as many (Megatron pads the embedding to a multiple of\n"+
			"# --make-vocab-size-divisible-by × tensor-parallel size)\n", c.vocab)
	}
	fmt.Fprintf(&b, "# world size %d = tensor %d × pipeline %d × data %d; %d micro-batches of %d per data-parallel rank\n",
		c.tp*c.pp*c.dp, c.tp, c.pp, c.dp, p.Microbatches, c.microBatch)
	b.WriteString("MEGATRON_ARGS=(\n")
	for _, a := range args {
		b.WriteString("    " + strings.TrimSpace(a[0]+" "+a[1]) + "\n")
	}
	b.WriteString(")\n")
	fmt.Fprintf(&b, "# torchrun --nproc-per-node %d pretrain_gpt.py \"${MEGATRON_ARGS[@]}\" (and your data and tokenizer arguments)\n",
		c.tp*c.pp*c.dp)
	return b.String(), nil
}

func optimizerArgs(o Optimizer) [][2]string {
	g := func(f float64) string { return fmt.Sprint(f) }
	switch o.Kind {
	case "adam":
		out := [][2]string{{"--optimizer", "adam"}, {"--lr", g(o.LR)}, {"--adam-beta1", g(o.Beta1)}, {"--adam-beta2", g(o.Beta2)}, {"--adam-eps", g(o.Eps)}}
		return append(out, [2]string{"--weight-decay", g(o.WeightDecay)})
	case "sgd":
		return [][2]string{{"--optimizer", "sgd"}, {"--lr", g(o.LR)}, {"--sgd-momentum", g(o.Momentum)}, {"--weight-decay", g(o.WeightDecay)}}
	}
	return nil
}

// readMegatron reads the plan as Megatron's configuration, returning every reason it is
// not one.
func readMegatron(p *Plan) (megatronConfig, []string) {
	c := megatronConfig{pp: len(p.Stages)}
	var reasons []string
	blocks := make([]int, len(p.Stages))
	for si := range p.Stages {
		s := &p.Stages[si]
		tp, dp, sp, rs, ns := readStage(si, s)
		c.notes = append(c.notes, ns...)
		reasons = append(reasons, rs...)
		if si == 0 {
			c.tp, c.dp, c.sequenceParall = tp, dp, sp
		} else {
			s0 := &p.Stages[0]
			if len(s.Devices) != len(s0.Devices) {
				reasons = append(reasons, fmt.Sprintf("stage %d has %d devices and stage 0 has %d: Megatron gives every pipeline stage as many devices",
					si, len(s.Devices), len(s0.Devices)))
			} else if len(rs) == 0 && tp != c.tp {
				reasons = append(reasons, fmt.Sprintf("stage %d is tensor %d × data %d and stage 0 is tensor %d × data %d: Megatron has one tensor-parallel size",
					si, tp, dp, c.tp, c.dp))
			}
			if len(rs) == 0 && sp != c.sequenceParall {
				reasons = append(reasons, fmt.Sprintf("stage %d and stage 0 differ in splitting layer norms along the sequence: --sequence-parallel is global", si))
			}
		}
		for _, v := range s.Values {
			switch {
			case v.Role == Activation && v.Op == "softmax" && len(v.Shape) == 4:
				blocks[si]++
				c.heads, c.seq = v.Shape[1], v.Shape[3]
			case v.Role == Activation && v.Op == "layer_norm" && len(v.Shape) > 0:
				c.hidden = v.Shape[len(v.Shape)-1]
			case v.Role == Param && (v.DType == "bf16" || v.DType == "f16"):
				c.dtypeFlag = map[string]string{"bf16": "--bf16", "f16": "--fp16"}[v.DType]
			case v.Role == State && usesDP(v, s):
				c.distOptimizer = true
			}
		}
		c.blocks += blocks[si]
	}
	switch {
	case c.blocks == 0:
		reasons = append(reasons, fmt.Sprintf("model %s has no attention (no softmax over rank-4 scores): Megatron-LM trains transformer language models", p.Model))
	case c.hidden == 0:
		reasons = append(reasons, fmt.Sprintf("model %s has no layer norm to read the hidden size from", p.Model))
	default:
		reasons = append(reasons, readWeights(p, &c)...)
		for si, n := range blocks {
			if n != blocks[0] {
				reasons = append(reasons, fmt.Sprintf("the stages hold %s transformer blocks: Megatron gives every stage num-layers / pipeline size of them", intList(blocks)))
				break
			} else if n == 0 {
				reasons = append(reasons, fmt.Sprintf("stage %d holds no transformer block", si))
				break
			}
		}
	}
	if mb := p.Batch / p.Microbatches; c.dp > 0 && mb%c.dp != 0 {
		reasons = append(reasons, fmt.Sprintf("a micro-batch of %d samples does not divide among %d data-parallel ranks", mb, c.dp))
	} else if c.dp > 0 {
		c.microBatch = mb / c.dp
	}
	if p.Schedule != "1f1b" {
		c.notes = append(c.notes, fmt.Sprintf("the plan's schedule is %s; Megatron runs 1F1B, which computes the same step with less memory", p.Schedule))
	}
	if c.distOptimizer {
		c.notes = append(c.notes, "the plan splits optimizer state across data-parallel ranks: --use-distributed-optimizer")
	}
	return c, reasons
}

// readWeights reads the embeddings and the MLP's width from the params and the forward
// ops that read them: the word embedding is the table a gather reads that an einsum or
// matmul also reads (tied to the output layer), else the largest such table; a second
// gathered table as long as the sequence is a learned position embedding; the MLP width
// is the other dim of the remaining matrices that is neither the hidden size nor the
// vocabulary, which Megatron takes one of.
func readWeights(p *Plan, c *megatronConfig) []string {
	var tables, matrices []*Value
	for si := range p.Stages {
		for vi := range p.Stages[si].Values {
			v := &p.Stages[si].Values[vi]
			if v.Role != Param || len(v.Shape) != 2 {
				continue
			}
			if slices.Contains(v.Users, "gather") {
				tables = append(tables, v)
			} else if slices.Contains(v.Users, "einsum") || slices.Contains(v.Users, "matmul") {
				matrices = append(matrices, v)
			}
		}
	}
	var word *Value
	for _, t := range tables {
		switch {
		case word == nil, wordTied(t) && !wordTied(word):
			word = t
		case wordTied(t) == wordTied(word) && t.Shape[0] > word.Shape[0]:
			word = t
		}
	}
	if word != nil {
		c.vocab, c.untied = word.Shape[0], !wordTied(word)
		for _, t := range tables {
			c.learnedPos = c.learnedPos || (t != word && t.Shape[0] == c.seq)
		}
	}
	widths := map[int]bool{}
	var list []int
	for _, m := range matrices {
		for _, d := range m.Shape {
			if d != c.hidden && d != c.vocab && !widths[d] {
				widths[d] = true
				list = append(list, d)
			}
		}
	}
	if i := slices.Index(list, 3*c.hidden); i >= 0 && len(list) == 2 {
		// A [hidden, 3·hidden] weight is Megatron's own fused query_key_value projection.
		list = slices.Delete(list, i, i+1)
	}
	switch len(list) {
	case 0:
	case 1:
		c.ffn = list[0]
	default:
		slices.Sort(list)
		return []string{fmt.Sprintf("the weights have the widths %s besides the hidden size %d: Megatron's MLP has one --ffn-hidden-size", intList(list), c.hidden)}
	}
	return nil
}

func wordTied(v *Value) bool {
	return slices.Contains(v.Users, "einsum") || slices.Contains(v.Users, "matmul")
}

// usesDP reports whether a state value is split on a mesh axis its stage uses for data
// parallelism (an axis of more than one device that no param is split on).
func usesDP(v Value, s *Stage) bool {
	tpAxes := mesh.AxesNone
	for _, w := range s.Values {
		if w.Role == Param {
			tpAxes |= normalize(w.Spec, s.Mesh).Used()
		}
	}
	return normalize(v.Spec, s.Mesh).Used()&^tpAxes != mesh.AxesNone
}

// readStage finds a stage's tensor-parallel axes from its params' specs (the mesh axes
// any weight is split on), and checks that the stage is what Megatron runs: each weight
// split on one dim over all the tensor-parallel axes or whole, the data split along its
// batch dim over the other axes, tensor-parallel ranks on consecutive devices, and layer
// norms whole or split along the sequence only. It returns the degrees, whether layer
// norms are split along the sequence (--sequence-parallel), and every reason it is not.
func readStage(si int, s *Stage) (tp, dp int, seqPar bool, reasons, notes []string) {
	tpAxes, first := mesh.AxesNone, ""
	for _, v := range s.Values {
		if v.Role != Param {
			continue
		}
		spec := normalize(v.Spec, s.Mesh)
		split := 0
		for _, a := range spec.Dims {
			if a != mesh.AxesNone {
				split++
			}
		}
		if split > 1 {
			reasons = append(reasons, fmt.Sprintf("stage %d: param %s is %s, split on %d dims: Megatron splits a weight along one dim (by columns or by rows)", si, v.Name, v.Spec, split))
			continue
		}
		if len(v.Shape) > 2 {
			reasons = append(reasons, fmt.Sprintf("stage %d: param %s is %s, not a matrix: the Megatron export covers dense transformers, whose weights are matrices (a stack of expert weights is a mixture-of-experts layer, which it does not export)", si, v.Name, v.Type()))
			continue
		}
		u := spec.Used()
		if u == mesh.AxesNone {
			continue
		}
		if tpAxes == mesh.AxesNone {
			tpAxes, first = u, v.Name+" is "+v.Spec.String()
		} else if u != tpAxes {
			reasons = append(reasons, fmt.Sprintf("stage %d: param %s is %s but %s: Megatron has one tensor-parallel group, the weights split over different mesh axes", si, v.Name, v.Spec, first))
		}
	}
	size := func(a mesh.AxisSet) int {
		n := 1
		for ax := range 2 {
			if a.Has(ax) {
				n *= s.Mesh[ax]
			}
		}
		return n
	}
	tp = size(tpAxes)
	dpAxes := (mesh.Axis0 | mesh.Axis1) &^ tpAxes &^ trivialAxes(s.Mesh)
	dp = size(dpAxes)
	if tpAxes == mesh.Axis0 && s.Mesh[1] > 1 {
		reasons = append(reasons, fmt.Sprintf("stage %d splits weights on mesh axis 0 of (%d, %d) and data on axis 1: Megatron's tensor-parallel ranks are consecutive devices, axis 1", si, s.Mesh[0], s.Mesh[1]))
	}
	for _, v := range s.Values {
		spec := normalize(v.Spec, s.Mesh)
		switch {
		case v.Role == Input && v.BatchDim >= 0:
			for d, a := range spec.Dims {
				if d == v.BatchDim && a&dpAxes != dpAxes {
					reasons = append(reasons, fmt.Sprintf("stage %d: input %s is %s: Megatron splits the batch (dim %d) over the data-parallel axes %s", si, v.Name, v.Spec, d, axesText(dpAxes)))
				}
				if d == v.BatchDim && a&tpAxes != mesh.AxesNone {
					notes = append(notes, fmt.Sprintf("stage %d splits input %s (%s) along the batch over the tensor-parallel group too, where Megatron replicates it; the weights' layout, which the arguments fix, is the same", si, v.Name, v.Spec))
				}
				if d != v.BatchDim && a != mesh.AxesNone {
					reasons = append(reasons, fmt.Sprintf("stage %d: input %s is %s: Megatron splits data only along the batch", si, v.Name, v.Spec))
				}
			}
		case v.Role == Activation && v.Op == "layer_norm" && len(spec.Dims) == 3:
			if spec.Dims[2] != mesh.AxesNone || spec.Dims[1]&^tpAxes != mesh.AxesNone {
				reasons = append(reasons, fmt.Sprintf("stage %d: layer norm %s is %s: Megatron keeps layer norms whole or, with --sequence-parallel, splits them along the sequence (dim 1) over the tensor-parallel axes", si, v.Name, v.Spec))
			} else if spec.Dims[1] != mesh.AxesNone {
				seqPar = true
			}
		}
	}
	return tp, dp, seqPar, reasons, notes
}

// trivialAxes are the axes of one device: splitting on them splits nothing.
func trivialAxes(m [2]int) mesh.AxisSet {
	t := mesh.AxesNone
	for ax := range 2 {
		if m[ax] == 1 {
			t |= 1 << ax
		}
	}
	return t
}

// normalize drops the axes of one device from s: S0R on a (1, 4) mesh is RR.
func normalize(s mesh.Spec, m [2]int) mesh.Spec {
	t := trivialAxes(m)
	out := mesh.Spec{Dims: make([]mesh.AxisSet, len(s.Dims)), Partial: s.Partial &^ t}
	for i, a := range s.Dims {
		out.Dims[i] = a &^ t
	}
	return out
}

func axesText(a mesh.AxisSet) string {
	if a == mesh.AxesNone {
		return "(none)"
	}
	return a.Digits()
}

func intList(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

// recomputeArgs turns the plan's recomputing stages into Megatron's full recomputation:
// layer by layer (--recompute-method uniform, one layer per checkpoint), or a stage's
// layers at once (as many layers per checkpoint as a stage holds). Megatron applies it to
// every pipeline stage alike, so a plan that recomputes only some stages, or some layer by
// layer and some whole, gets the first recomputing stage's way everywhere, with a note in
// b saying so.
func recomputeArgs(p *Plan, c *megatronConfig, b *strings.Builder) [][2]string {
	var some []string
	first := -1
	mixed := false
	for i, s := range p.Stages {
		if !s.Recompute {
			continue
		}
		some = append(some, fmt.Sprint(i))
		if first < 0 {
			first = i
		}
		mixed = mixed || s.RecomputeLayers != p.Stages[first].RecomputeLayers
	}
	if first < 0 {
		return nil
	}
	if len(some) < len(p.Stages) || mixed {
		fmt.Fprintf(b, "# note: the plan recomputes the activations of stage %s, not all alike; Megatron-LM recomputes every stage as stage %d does\n",
			strings.Join(some, ", "), first)
	}
	per := 1
	if !p.Stages[first].RecomputeLayers && c.pp > 0 {
		per = max(1, c.blocks/c.pp)
	}
	return [][2]string{{"--recompute-granularity", "full"}, {"--recompute-method", "uniform"}, {"--recompute-num-layers", fmt.Sprint(per)}}
}
