package zoo

import (
	"fmt"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// GPT is a decoder-only transformer language model as in Alpa's GPT benchmark: token and
// position embeddings, Layers pre-LN blocks of causal self-attention and a gelu MLP, a final
// layer norm, logits against the (tied) token embedding and the mean next-token
// cross-entropy. Its parameter count is about 12·Layers·Hidden² + (Vocab+Seq)·Hidden.
type GPT struct {
	Layers, Hidden, Heads, Seq, Vocab, Batch int
	// FFN is the MLP's expansion factor (4 in GPT and Alpa).
	FFN int
	// Tied is set when the logits use the token embedding (GPT-2, Alpa), unset for a
	// separate head matrix.
	Tied bool
	// Dropout is the rate after the embedding, attention and MLP; 0 emits no dropout ops.
	Dropout float64
	// DType is the dtype of params and activations ("f32", "f16", "bf16").
	DType string
	// FusedQKV makes q, k and v with one [H, 3H] projection, as Megatron-LM does, instead
	// of three [H, H] ones: under tensor parallelism its input gradient is one all-reduce,
	// not three (see transformer.attention).
	FusedQKV bool
}

// NewGPT returns the tiny default config: 2 layers, hidden 32, 4 heads, seq 16, vocab 64,
// batch 8, q, k and v fused into one projection.
func NewGPT() *GPT {
	return &GPT{Layers: 2, Hidden: 32, Heads: 4, Seq: 16, Vocab: 64, Batch: 8, FFN: 4, Tied: true, DType: "f32",
		FusedQKV: true}
}

// Name returns "gpt".
func (m *GPT) Name() string { return "gpt" }

// Params lists the knobs.
func (m *GPT) Params() []Param {
	return []Param{
		intParam("layers", "number of transformer layers", &m.Layers),
		intParam("hidden", "hidden size", &m.Hidden),
		intParam("heads", "attention heads (must divide hidden)", &m.Heads),
		intParam("seq", "sequence length", &m.Seq),
		intParam("vocab", "vocabulary size", &m.Vocab),
		intParam("batch", "global batch size (sequences)", &m.Batch),
		intParam("ffn", "MLP expansion factor", &m.FFN),
		boolParam("tied", "the logits use the token embedding (--tied=false: a separate head)", &m.Tied),
		floatParam("dropout", "dropout rate (0: none)", &m.Dropout),
		stringParam("dtype", "dtype of params and activations (f32, f16, bf16)", &m.DType),
		boolParam("fused-qkv", "q, k and v come from one [hidden, 3·hidden] projection, as in Megatron-LM (--fused-qkv=false: three)", &m.FusedQKV),
	}
}

func (m *GPT) config(k *knobs) *transformer {
	t := &transformer{dt: k.dtype(m.DType), batch: m.Batch, seq: m.Seq, hidden: m.Hidden,
		heads: m.Heads, ffn: m.FFN, vocab: m.Vocab, tied: m.Tied, dropout: m.Dropout, fusedQKV: m.FusedQKV}
	t.check(k, m.Layers)
	return t
}

// Build makes the forward graph; its output is the scalar loss.
func (m *GPT) Build() (*ir.Graph, error) {
	k := &knobs{model: "gpt"}
	t := m.config(k)
	if k.err != nil {
		return nil, k.err
	}
	b := frontend.NewBuilder("gpt")
	x, wte := t.embed(b)
	mask := causalMask(b, t.seq)
	for i := 0; i < m.Layers; i++ {
		x = t.layer(b.Scope(fmt.Sprintf("l%d", i)).Block(i+1), x, mask, nil)
	}
	t.head(b, x, wte)
	return b.Build()
}
