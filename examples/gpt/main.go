package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime/interp"
)

// config is the model and the run.
type config struct {
	layers, hidden, heads, seq, vocab, batch int
	cluster                                  string
	microbatches                             int
	// stageLayers is how many layers autopar clusters the training step into before its
	// stage search (Options.Layers): fewer is a faster search with fewer pipeline choices.
	stageLayers int
	steps       int
	lr          float64
	seed        int64
	// save is the checkpoint written after the last step, resume the one started from
	// (under this run's plan, whatever plan saved it).
	save, resume string
}

func defaultConfig() config {
	return config{layers: 2, hidden: 64, heads: 4, seq: 16, vocab: 128, batch: 16,
		cluster: "cpu:4", microbatches: 2, stageLayers: 2, steps: 50, lr: 3e-3, seed: 1}
}

func main() {
	c := defaultConfig()
	flag.IntVar(&c.steps, "steps", c.steps, "training steps")
	flag.StringVar(&c.cluster, "cluster", c.cluster, "cluster to compile for (preset[:hosts])")
	flag.IntVar(&c.microbatches, "microbatches", c.microbatches, "micro-batches per step (0: let autopar search)")
	flag.IntVar(&c.stageLayers, "stage-layers", c.stageLayers, "layers the step is clustered into for the stage search (0: automatic)")
	flag.Float64Var(&c.lr, "lr", c.lr, "Adam learning rate")
	flag.StringVar(&c.save, "save", "", "save a checkpoint to `FILE` after the last step")
	flag.StringVar(&c.resume, "resume", "", "resume from the checkpoint in `FILE`")
	flag.Parse()
	if _, err := train(context.Background(), os.Stdout, c); err != nil {
		log.Fatal(err)
	}
}

// train compiles the model for the cluster and trains c.steps steps of it with an
// autopar.Trainer, which keeps the params and Adam's state on the devices, printing and
// returning the loss of each.
func train(ctx context.Context, w io.Writer, c config) ([]float64, error) {
	model, err := buildGPT(c)
	if err != nil {
		return nil, err
	}
	cl, err := mesh.ParseCluster(c.cluster)
	if err != nil {
		return nil, err
	}
	opt := passes.Optimizer{Kind: "adam", LR: c.lr}
	plan, err := autopar.Compile(ctx, model, cl, autopar.Options{Optimizer: opt, Microbatches: c.microbatches, Layers: c.stageLayers})
	if err != nil {
		return nil, err
	}
	for i, s := range plan.Stages {
		fmt.Fprintf(w, "stage %d: layers %d-%d on devices %v, logical mesh (dp %d, mp %d)\n",
			i, s.FirstLayer, s.LastLayer, s.Devices, s.Logical[0], s.Logical[1])
	}
	opts := autopar.TrainerOptions{Seed: c.seed}
	if c.resume != "" {
		if opts.Checkpoint, err = autopar.LoadCheckpoint(c.resume); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "resuming %s at step %d\n", c.resume, opts.Checkpoint.Step)
	}
	tr, err := autopar.NewTrainer(ctx, plan, opts)
	if err != nil {
		return nil, err
	}
	// One fixed batch of random tokens and targets: the loss falls as the model learns it.
	data, err := interp.GenerateInputs(model, c.seed+1)
	if err != nil {
		return nil, err
	}
	batch := autopar.Batch{"tokens": data["tokens"], "targets": data["targets"]}
	var losses []float64
	for range c.steps {
		loss, err := tr.Step(ctx, batch)
		if err != nil {
			return nil, err
		}
		if math.IsNaN(loss) {
			return nil, fmt.Errorf("step %d: the loss is NaN", tr.Steps())
		}
		losses = append(losses, loss)
		fmt.Fprintf(w, "step %3d  loss %.4f\n", tr.Steps(), loss)
	}
	if c.save != "" {
		if err := tr.Save(c.save); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "saved %s\n", c.save)
	}
	return losses, nil
}

// gpt holds what every block of the model needs while it is being recorded.
type gpt struct {
	c    config
	mask frontend.Value // bool [S,S]: query q may see key k ≤ q
}

// buildGPT records the forward graph: embeddings, c.layers pre-LN blocks named l0, l1, ...
// (autopar's layer clustering and the sharding pass group ops by that prefix), a final
// norm, a vocabulary head and the mean next-token cross-entropy.
func buildGPT(c config) (*ir.Graph, error) {
	if c.hidden%c.heads != 0 {
		return nil, fmt.Errorf("gpt: %d heads do not divide hidden %d", c.heads, c.hidden)
	}
	b := frontend.NewBuilder("gpt")
	tokens := b.Input("tokens", ir.I32, ir.Shape{c.batch, c.seq}, 0, frontend.Limit(c.vocab))
	targets := b.Input("targets", ir.I32, ir.Shape{c.batch, c.seq}, 0, frontend.Limit(c.vocab))
	m := &gpt{c: c}
	m.mask = b.Named("causal").Ge(b.Iota(ir.I32, ir.Shape{c.seq, c.seq}, 0), b.Iota(ir.I32, ir.Shape{c.seq, c.seq}, 1))

	emb := b.Scope("embed")
	tok := emb.Param("tokens", ir.F32, ir.Shape{c.vocab, c.hidden})
	pos := emb.Param("positions", ir.F32, ir.Shape{c.seq, c.hidden})
	x := emb.Named("sum").Add(emb.Gather(tok, tokens), pos)
	for i := range c.layers {
		x = m.block(b.Scope(fmt.Sprintf("l%d", i)).Block(i+1), x)
	}
	head := b.Scope("head")
	x = norm(head.Scope("norm"), x)
	logits := head.Named("logits").Einsum("bsh,hv->bsv", x, head.Param("w", ir.F32, ir.Shape{c.hidden, c.vocab}))
	b.Output(b.Named("loss").ReduceMean(b.SparseCrossEntropy(logits, targets), 0, 1))
	return b.Build()
}

// block is one transformer block: x + attention(norm(x)), then + mlp(norm(x)).
func (m *gpt) block(b *frontend.Builder, x frontend.Value) frontend.Value {
	x = b.Named("attn.res").Add(x, m.attention(b.Scope("attn"), norm(b.Scope("norm1"), x)))
	return b.Named("mlp.res").Add(x, m.mlp(b.Scope("mlp"), norm(b.Scope("norm2"), x)))
}

// attention is causal multi-head self-attention over [B,S,H].
func (m *gpt) attention(b *frontend.Builder, x frontend.Value) frontend.Value {
	c := m.c
	d := c.hidden / c.heads
	heads := func(name string) frontend.Value {
		return b.Named(name+".heads").Reshape(linear(b.Scope(name), x, c.hidden), ir.Shape{c.batch, c.seq, c.heads, d})
	}
	q, k, v := heads("q"), heads("k"), heads("v")
	scores := b.Named("scores").Einsum("bqnd,bknd->bnqk", q, k)
	scores = b.Mul(scores, b.Scalar(1/math.Sqrt(float64(d)), ir.F32))
	scores = b.Where(m.mask, scores, b.Scalar(-1e4, ir.F32))
	mixed := b.Named("mixed").Einsum("bnqk,bknd->bqnd", b.Softmax(scores, 3), v)
	return linear(b.Scope("out"), b.Reshape(mixed, ir.Shape{c.batch, c.seq, c.hidden}), c.hidden)
}

// mlp is the feed-forward block: widen four times, gelu, narrow back.
func (m *gpt) mlp(b *frontend.Builder, x frontend.Value) frontend.Value {
	return linear(b.Scope("down"), b.Gelu(linear(b.Scope("up"), x, 4*m.c.hidden)), m.c.hidden)
}

// linear is x·w + bias over the last dim of x [B,S,in].
func linear(b *frontend.Builder, x frontend.Value, out int) frontend.Value {
	w := b.Param("w", ir.F32, ir.Shape{x.Dim(-1), out})
	bias := b.Param("b", ir.F32, ir.Shape{out}, frontend.Zeros)
	return b.Add(b.Einsum("bsi,io->bso", x, w), bias)
}

// norm is layer normalization over the last dim with a learned scale and shift.
func norm(b *frontend.Builder, x frontend.Value) frontend.Value {
	h := x.Dim(-1)
	return b.LayerNorm(x, b.Param("scale", ir.F32, ir.Shape{h}, frontend.Ones), b.Param("shift", ir.F32, ir.Shape{h}, frontend.Zeros), 1e-5)
}
