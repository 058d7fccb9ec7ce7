package zoo

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// The blocks GPT and MoE share: embeddings, layer norm, dense projections, causal
// self-attention, the feed-forward block and the language-model head. Each takes a builder
// already scoped to its name (l3.attn) and names what it makes under that scope.

// maskValue is what a masked attention score is set to: far below any real score so its
// softmax weight is 0, yet finite in f16 (whose largest value is 65504) so that no -inf
// reaches the kernels.
const maskValue = -1e4

// transformer is the config the shared blocks read.
type transformer struct {
	dt                             ir.DType
	batch, seq, hidden, heads, ffn int
	vocab                          int
	tied                           bool
	dropout                        float64
	// fusedQKV: one projection makes q, k and v (see attention).
	fusedQKV bool
	// seed numbers the dropout ops so that each gets its own mask.
	seed int
}

// layerNorm normalizes x over its last dim with a learned scale (ones) and shift (zeros).
func layerNorm(b *frontend.Builder, x frontend.Value, dt ir.DType) frontend.Value {
	h := x.Dim(-1)
	gamma := b.Param("gamma", dt, ir.Shape{h}, frontend.Ones)
	beta := b.Param("beta", dt, ir.Shape{h}, frontend.Zeros)
	return b.LayerNorm(x, gamma, beta, 1e-5)
}

// dense is x·w + bias over the last dim of a [B,in] or [B,S,in] tensor, with params
// NAME.w and NAME.b; the result is named NAME. Rank-3 inputs use an einsum so that the
// batch and sequence dims stay visible to the sharding pass.
func dense(b *frontend.Builder, x frontend.Value, name string, out int, dt ir.DType) frontend.Value {
	s := b.Scope(name)
	w := s.Param("w", dt, ir.Shape{x.Dim(-1), out})
	bias := s.Param("b", dt, ir.Shape{out}, frontend.Zeros)
	var y frontend.Value
	switch x.Shape().Rank() {
	case 2:
		y = s.MatMul(x, w)
	case 3:
		y = s.Einsum("bsi,io->bso", x, w)
	default:
		if x.Valid() {
			panic(fmt.Sprintf("zoo: dense %s of rank-%d input", name, x.Shape().Rank()))
		}
		return x // the builder has already recorded an error
	}
	return b.Named(name).Add(y, bias)
}

// maybeDropout applies dropout when the config asks for it, with a fresh seed per op.
func (t *transformer) maybeDropout(b *frontend.Builder, x frontend.Value) frontend.Value {
	if t.dropout == 0 {
		return x
	}
	t.seed++
	return b.Dropout(x, t.dropout, t.seed)
}

// causalMask is the bool [S,S] matrix that is true where query q may attend to key k
// (k <= q), built from two iotas so that no [S,S] constant needs to be stored.
func causalMask(b *frontend.Builder, seq int) frontend.Value {
	s := b.Scope("mask")
	q := s.Named("q").Iota(ir.I32, ir.Shape{seq, seq}, 0)
	k := s.Named("k").Iota(ir.I32, ir.Shape{seq, seq}, 1)
	return b.Named("mask").Ge(q, k)
}

// attention is causal multi-head self-attention on x [B,S,H]: q, k, v projections, heads
// split by reshape to [B,S,n,d], scores and context as batched einsums over (b, n), the
// mask applied with where, softmax over keys, and the output projection.
func (t *transformer) attention(b *frontend.Builder, x, mask frontend.Value) frontend.Value {
	B, S, H, n := t.batch, t.seq, t.hidden, t.heads
	d := H / n
	var q, k, v frontend.Value
	if t.fusedQKV {
		q, k, v = t.fusedProjection(b, x)
	} else {
		split := func(name string) frontend.Value {
			p := dense(b, x, name, H, t.dt)
			return b.Named(name+".heads").Reshape(p, ir.Shape{B, S, n, d})
		}
		q, k, v = split("q"), split("k"), split("v")
	}
	scores := b.Named("scores").Einsum("bqnd,bknd->bnqk", q, k)
	scores = b.Named("scaled").Mul(scores, b.Named("scale").Scalar(1/math.Sqrt(float64(d)), t.dt))
	scores = b.Named("masked").Where(mask, scores, b.Named("neg").Scalar(maskValue, t.dt))
	probs := b.Named("probs").Softmax(scores, 3)
	ctx := b.Named("ctx").Einsum("bnqk,bknd->bqnd", probs, v)
	ctx = b.Named("ctx.merged").Reshape(ctx, ir.Shape{B, S, H})
	return t.maybeDropout(b, dense(b, ctx, "o", H, t.dt))
}

// fusedProjection makes q, k and v [B,S,n,d] from x [B,S,H] with one projection qkv to
// [B,S,3H], laid out head by head as Megatron-LM does: reshaped to [B,S,n,3d], head h's
// q, k and v are its columns [0,d), [d,2d) and [2d,3d). So splitting the projection's
// columns over devices (column parallelism) splits the heads dim n, and the three slices,
// which cut only the last dim, stay on the device that holds the head: no communication,
// and the backward sums the three into one input gradient, one all-reduce.
func (t *transformer) fusedProjection(b *frontend.Builder, x frontend.Value) (q, k, v frontend.Value) {
	B, S, H, n := t.batch, t.seq, t.hidden, t.heads
	d := H / n
	p := dense(b, x, "qkv", 3*H, t.dt)
	heads := b.Named("qkv.heads").Reshape(p, ir.Shape{B, S, n, 3 * d})
	part := func(name string, i int) frontend.Value {
		return b.Named(name+".heads").Slice(heads, []int{0, 0, 0, i * d}, []int{B, S, n, (i + 1) * d})
	}
	return part("q", 0), part("k", 1), part("v", 2)
}

// feedForward is the position-wise MLP: H -> ffn·H with gelu -> H.
func (t *transformer) feedForward(b *frontend.Builder, x frontend.Value) frontend.Value {
	h := dense(b, x, "w1", t.ffn*t.hidden, t.dt)
	h = b.Gelu(h)
	return t.maybeDropout(b, dense(b, h, "w2", t.hidden, t.dt))
}

// layer is one pre-LN transformer block: x + attn(ln1(x)), then + ffn(ln2(·)), where ffn
// is the dense feed-forward block unless the caller passes another (the MoE layer).
func (t *transformer) layer(b *frontend.Builder, x, mask frontend.Value,
	ffn func(*frontend.Builder, frontend.Value) frontend.Value) frontend.Value {
	a := t.attention(b.Scope("attn"), layerNorm(b.Scope("ln1"), x, t.dt), mask)
	x = b.Named("res1").Add(x, a)
	name := "mlp"
	if ffn == nil {
		ffn = t.feedForward
	} else {
		name = "moe"
	}
	m := ffn(b.Scope(name), layerNorm(b.Scope("ln2"), x, t.dt))
	return b.Named("res2").Add(x, m)
}

// embed declares the token ids and looks up token and position embeddings; it returns the
// hidden states [B,S,H] and the token table, which the head may reuse (tied embeddings).
func (t *transformer) embed(b *frontend.Builder) (x, wte frontend.Value) {
	tokens := b.Input("tokens", ir.I32, ir.Shape{t.batch, t.seq}, 0, frontend.Limit(t.vocab))
	wte = b.Param("wte", t.dt, ir.Shape{t.vocab, t.hidden})
	wpe := b.Param("wpe", t.dt, ir.Shape{t.seq, t.hidden})
	tok := b.Named("tok_emb").Gather(wte, tokens)
	pos := b.Named("pos_emb").Gather(wpe, b.Named("positions").Iota(ir.I32, ir.Shape{t.seq}, 0))
	return t.maybeDropout(b, b.Named("embed").Add(tok, pos)), wte
}

// head is the final layer norm, the logits over the vocabulary (with the token table when
// tied, as GPT-2 and Alpa do) and the mean next-token cross-entropy, marked as the output.
func (t *transformer) head(b *frontend.Builder, x, wte frontend.Value) frontend.Value {
	labels := b.Input("labels", ir.I32, ir.Shape{t.batch, t.seq}, 0, frontend.Limit(t.vocab))
	h := layerNorm(b.Scope("lnf"), x, t.dt)
	var logits frontend.Value
	if t.tied {
		logits = b.Named("logits").Einsum("bsh,vh->bsv", h, wte)
	} else {
		w := b.Param("head.w", t.dt, ir.Shape{t.hidden, t.vocab})
		logits = b.Named("logits").Einsum("bsh,hv->bsv", h, w)
	}
	ce := b.Named("ce").SparseCrossEntropy(logits, labels)
	loss := b.Named("loss").ReduceMean(ce, 0, 1)
	b.Output(loss)
	return loss
}

// check validates the config shared by GPT and MoE.
func (t *transformer) check(k *knobs, layers int) {
	k.positive("layers", layers, "hidden", t.hidden, "heads", t.heads, "seq", t.seq,
		"vocab", t.vocab, "batch", t.batch, "ffn", t.ffn)
	k.divides("hidden", t.hidden, "heads", t.heads)
	if !(t.dropout >= 0 && t.dropout < 1) {
		k.fail("dropout must be in [0, 1), got %g", t.dropout)
	}
}
