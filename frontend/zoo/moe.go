package zoo

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/ir"
)

// MoE is the GShard mixture-of-experts transformer of Alpa's MoE benchmark: the GPT stack in
// which every other layer (the odd ones) replaces its MLP by Experts expert MLPs with top-2
// gating. Tokens are split into groups of Group tokens; each expert takes at most
// C = ceil(Capacity·2·Group/Experts) tokens of a group, the rest are dropped (their
// residual passes through). Dispatch and combine are dense [G,S,E,C] tensors contracted with
// einsums, GShard's formulation, so expert parallelism is just splitting the e label.
type MoE struct {
	Layers, Hidden, Heads, Seq, Vocab, Batch int
	// FFN is the expansion factor of both the dense and the expert MLPs; Alpa uses 8.
	FFN     int
	Experts int
	// Group is the number of tokens per gating group (GShard's S); it must divide
	// Batch·Seq.
	Group int
	// Capacity is the capacity factor: 1 gives each expert 2·Group/Experts slots, an even
	// share of the top-2 assignments (Alpa's setting).
	Capacity float64
	Tied     bool
	Dropout  float64
	DType    string
}

// NewMoE returns the tiny default config: 2 layers (one MoE), hidden 32, 4 heads, seq 16,
// vocab 64, batch 8, 4 experts, groups of 64 tokens.
func NewMoE() *MoE {
	return &MoE{Layers: 2, Hidden: 32, Heads: 4, Seq: 16, Vocab: 64, Batch: 8, FFN: 4,
		Experts: 4, Group: 64, Capacity: 1, Tied: true, DType: "f32"}
}

// Name returns "moe".
func (m *MoE) Name() string { return "moe" }

// Params lists the knobs.
func (m *MoE) Params() []Param {
	return []Param{
		intParam("layers", "number of transformer layers (odd ones are MoE)", &m.Layers),
		intParam("hidden", "hidden size", &m.Hidden),
		intParam("heads", "attention heads (must divide hidden)", &m.Heads),
		intParam("seq", "sequence length", &m.Seq),
		intParam("vocab", "vocabulary size", &m.Vocab),
		intParam("batch", "global batch size (sequences)", &m.Batch),
		intParam("ffn", "MLP and expert expansion factor", &m.FFN),
		intParam("experts", "experts per MoE layer", &m.Experts),
		intParam("group", "tokens per gating group (must divide batch·seq)", &m.Group),
		floatParam("capacity", "capacity factor (1: 2·group/experts slots per expert)", &m.Capacity),
		boolParam("tied", "the logits use the token embedding (--tied=false: a separate head)", &m.Tied),
		floatParam("dropout", "dropout rate (0: none)", &m.Dropout),
		stringParam("dtype", "dtype of params and activations (f32, f16, bf16)", &m.DType),
	}
}

// capacitySlots is C, the slots per expert and group.
func (m *MoE) capacitySlots() int {
	return max(1, int(math.Ceil(m.Capacity*2*float64(m.Group)/float64(m.Experts))))
}

// Build makes the forward graph; its output is the scalar loss.
func (m *MoE) Build() (*ir.Graph, error) {
	k := &knobs{model: "moe"}
	t := (&GPT{Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads, Seq: m.Seq, Vocab: m.Vocab,
		Batch: m.Batch, FFN: m.FFN, Tied: m.Tied, Dropout: m.Dropout, DType: m.DType}).config(k)
	k.model = "moe"
	k.positive("experts", m.Experts, "group", m.Group)
	k.divides("batch·seq", m.Batch*m.Seq, "group", m.Group)
	if !(m.Capacity > 0) {
		k.fail("capacity must be positive, got %g", m.Capacity)
	}
	if k.err != nil {
		return nil, k.err
	}
	b := frontend.NewBuilder("moe")
	x, wte := t.embed(b)
	mask := causalMask(b, t.seq)
	moe := func(b *frontend.Builder, x frontend.Value) frontend.Value { return m.experts(b, t, x) }
	for i := 0; i < m.Layers; i++ {
		ffn := moe
		if i%2 == 0 {
			ffn = nil
		}
		x = t.layer(b.Scope(fmt.Sprintf("l%d", i)).Block(i+1), x, mask, ffn)
	}
	t.head(b, x, wte)
	return b.Build()
}

// experts is the MoE feed-forward block on x [B,S,H]: gating, dispatch to the experts'
// MLPs and combination of their outputs, following GShard's top-2 gating (and Alpa's
// transcription of it) with dense einsums.
func (m *MoE) experts(b *frontend.Builder, t *transformer, x frontend.Value) frontend.Value {
	E, H, C, dt := m.Experts, t.hidden, m.capacitySlots(), t.dt
	xg := m.groupTokens(b, x, t)
	wg := b.Param("wg", dt, ir.Shape{H, E})
	gates := b.Named("gates").Softmax(b.Named("gate_logits").Einsum("gsh,he->gse", xg, wg), 2)
	combine, dispatch := m.route(b, gates, C, dt)

	wi := b.Param("wi", dt, ir.Shape{E, H, t.ffn * H})
	wo := b.Param("wo", dt, ir.Shape{E, t.ffn * H, H})
	in := b.Named("expert_in").Einsum("gsec,gsh->egch", dispatch, xg)
	h := b.Named("expert_h").Relu(b.Einsum("egch,ehf->egcf", in, wi))
	out := b.Named("expert_out").Einsum("egcf,efh->gech", h, wo)
	y := b.Named("combined").Einsum("gsec,gech->gsh", combine, out)
	return t.maybeDropout(b, m.ungroupTokens(b, y, t))
}

// groupSplit is the intermediate shape between [B,T,H] and the groups [G,S,H] in which
// the group dim comes from the batch dim alone: [G, S/T, T, H] when a group spans whole
// sequences, [B, T/S, S, H] when a sequence holds whole groups. Reshaping through it
// keeps the batch's identity (G is the batch dim split or merged with its minor part), so
// the sharding pass can split groups as it splits the batch and micro-batching rescales G.
// It returns nil when neither divides the other, or when no reshape is needed (S = T).
func (m *MoE) groupSplit(t *transformer) ir.Shape {
	B, T, H, S := t.batch, t.seq, t.hidden, m.Group
	switch {
	case S == T:
		return nil
	case S%T == 0 && B%(S/T) == 0:
		return ir.Shape{B / (S / T), S / T, T, H}
	case T%S == 0:
		return ir.Shape{B, T / S, S, H}
	}
	return nil
}

// groupTokens reshapes x [B,T,H] into GShard's token groups [G,S,H].
func (m *MoE) groupTokens(b *frontend.Builder, x frontend.Value, t *transformer) frontend.Value {
	G, S := t.batch*t.seq/m.Group, m.Group
	if S == t.seq {
		return x
	}
	if mid := m.groupSplit(t); mid != nil {
		x = b.Named("groups.split").Reshape(x, mid)
	}
	return b.Named("groups").Reshape(x, ir.Shape{G, S, t.hidden})
}

// ungroupTokens is the inverse of groupTokens: [G,S,H] back to [B,T,H].
func (m *MoE) ungroupTokens(b *frontend.Builder, y frontend.Value, t *transformer) frontend.Value {
	if m.Group == t.seq {
		return y
	}
	if mid := m.groupSplit(t); mid != nil {
		y = b.Named("out.split").Reshape(y, mid)
	}
	return b.Named("out").Reshape(y, ir.Shape{t.batch, t.seq, t.hidden})
}

// route turns gate probabilities [G,S,E] into the combine tensor [G,S,E,C], the weight
// with which token s of group g takes back the output of slot c of expert e, and the 0/1
// dispatch tensor of the same shape saying which slot each token is sent to. The top-1
// expert is the max (reduce_max + eq), the top-2 the max once it is masked out; a token's
// position in its expert's queue is a cumsum over the group's tokens, top-2 assignments
// queueing behind all top-1 ones, and assignments at or past capacity are dropped.
//
// Every 0/1 mask is where(cond, 1, 0), never cast(cond): a where's condition carries no
// gradient by design, so the routing decisions are constants to autodiff (GShard's
// stop-gradient) and the gradient reaches the gate only through the gate weights.
func (m *MoE) route(b *frontend.Builder, gates frontend.Value, C int, dt ir.DType) (combine, dispatch frontend.Value) {
	G, S, E := gates.Dim(0), gates.Dim(1), gates.Dim(2)
	one, zero := b.Named("r.one").Scalar(1, dt), b.Named("r.zero").Scalar(0, dt)
	capC := b.Named("cap").Scalar(float64(C), dt)
	indicator := func(cond frontend.Value) frontend.Value { return b.Where(cond, one, zero) }
	argmax := func(name string, p frontend.Value) frontend.Value {
		top := b.Reshape(b.ReduceMax(p, 2), ir.Shape{G, S, 1})
		return b.Named(name).Where(b.Eq(p, top), one, zero)
	}
	mask1 := argmax("top1", gates)
	rest := b.Named("gates_rest").Mul(gates, b.Sub(one, mask1))
	mask2 := argmax("top2", rest)

	// Positions in the expert queues, and the capacity cut.
	pos1 := b.Named("pos1").Sub(b.Cumsum(mask1, 1), mask1)
	mask1 = b.Named("kept1").Mul(mask1, indicator(b.Lt(pos1, capC)))
	count1 := b.Named("count1").Reshape(b.ReduceSum(mask1, 1), ir.Shape{G, 1, E})
	pos2 := b.Named("pos2").Add(b.Sub(b.Cumsum(mask2, 1), mask2), count1)
	mask2 = b.Named("kept2").Mul(mask2, indicator(b.Lt(pos2, capC)))

	// Gate weights of the kept assignments, renormalized over the (at most) two.
	gate1 := b.Named("gate1").ReduceSum(b.Mul(gates, mask1), 2)
	gate2 := b.Named("gate2").ReduceSum(b.Mul(rest, mask2), 2)
	denom := b.Add(gate1, gate2)
	denom = b.Named("denom").Where(b.Gt(denom, zero), denom, one)
	slots := b.Named("slots").Iota(dt, ir.Shape{C}, 0)
	part := func(name string, gate, mask, pos frontend.Value) frontend.Value {
		w := b.Mul(b.Reshape(b.Div(gate, denom), ir.Shape{G, S, 1}), mask)
		at := b.Reshape(b.ReduceSum(b.Mul(pos, mask), 2), ir.Shape{G, S, 1})
		onehot := indicator(b.Eq(at, slots))
		return b.Named(name).Einsum("gse,gsc->gsec", w, onehot)
	}
	combine = b.Named("combine").Add(part("combine1", gate1, mask1, pos1), part("combine2", gate2, mask2, pos2))
	return combine, b.Named("dispatch").Where(b.Gt(combine, zero), one, zero)
}
