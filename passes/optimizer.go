package passes

import (
	"fmt"
	"math"

	"github.com/autopar/autopar/ir"
)

// Optimizer says how TrainingStep updates the params. Its hyperparameters become scalar
// constants of the step graph.
type Optimizer struct {
	// Kind is "sgd" or "adam".
	Kind string
	// LR is the learning rate, > 0.
	LR float64
	// Momentum is SGD's heavy-ball coefficient mu in [0, 1): v = mu·v + g; p -= lr·v. With 0
	// the step is plain SGD and keeps no state.
	Momentum float64
	// Beta1, Beta2 and Eps are Adam's; 0 takes Adam's defaults 0.9, 0.999 and 1e-8.
	Beta1, Beta2, Eps float64
	// WeightDecay is decoupled (AdamW: p -= lr·wd·p) for Adam and the classic L2 term
	// (g += wd·p, before momentum) for SGD. 0 is none.
	WeightDecay float64
	// Precision names the dtypes of the step (ParsePrecision): "" keeps the model's,
	// "mixed" computes in bf16 with f32 master weights and optimizer state.
	Precision string
	// LossScale is a static loss scale S (Megatron-LM's --loss-scale): the backward starts
	// from the loss times S, so that small f16 gradients do not flush to zero, and the
	// update divides the gradients by S (in f32 for half params). The gradients the step
	// computes are the scaled ones. 0 or 1: none. S past the gradient dtype's range
	// (65504 for f16) overflows to inf.
	LossScale float64
}

// withDefaults fills Adam's zero hyperparameters and checks every range.
func (o Optimizer) withDefaults() (Optimizer, error) {
	bad := func(what string, v float64) (Optimizer, error) {
		return o, fmt.Errorf("optimizer %s: %s, got %g", o.Kind, what, v)
	}
	switch o.Kind {
	case "sgd":
		if !(o.Momentum >= 0 && o.Momentum < 1) {
			return bad("momentum must be in [0, 1)", o.Momentum)
		}
	case "adam":
		o.Beta1, o.Beta2, o.Eps = orDefault(o.Beta1, 0.9), orDefault(o.Beta2, 0.999), orDefault(o.Eps, 1e-8)
		for _, b := range []float64{o.Beta1, o.Beta2} {
			if !(b > 0 && b < 1) {
				return bad("beta1 and beta2 must be in (0, 1)", b)
			}
		}
		if !(o.Eps > 0) || math.IsInf(o.Eps, 0) {
			return bad("eps must be positive", o.Eps)
		}
	default:
		return o, fmt.Errorf("unknown optimizer %q, want sgd or adam", o.Kind)
	}
	if _, err := ParsePrecision(o.Precision); err != nil {
		return o, err
	}
	if !(o.LossScale >= 0) || math.IsInf(o.LossScale, 0) {
		return bad("the loss scale must be positive (or 0 for none)", o.LossScale)
	}
	if !(o.LR > 0) || math.IsInf(o.LR, 0) {
		return bad("the learning rate must be positive", o.LR)
	}
	if !(o.WeightDecay >= 0) || math.IsInf(o.WeightDecay, 0) {
		return bad("weight decay must be >= 0", o.WeightDecay)
	}
	return o, nil
}

func orDefault(v, d float64) float64 {
	if v == 0 {
		return d
	}
	return v
}

// TrainingStep turns g, a forward graph whose first output is a scalar float loss, into
// one training step, as Alpa compiles it: forward, loss, backward (Grad with respect to
// every param) and the update of every param, with state values for the optimizer state —
// "<p>.m" for SGD with momentum; "<p>.m", "<p>.v" and the scalar step counter "adam.t" for
// Adam; "<p>.rem", an f32 master weight's remainder, for a half param under mixed
// precision — and an ir.Update for every param and state it adds. State is marked
// ir.RoleState of its param (Slot "m", "v", "rem"; "t" for the counter), every update op
// ir.RoleUpdate of its param (of none for Adam's clock). The loss stays the first
// output; g is not modified. The update of an f16 or bf16 param is computed in f32 with f32
// state, and rounded back to the param's dtype. opt.Precision first converts g
// (ConvertPrecision) and, for mixed precision, keeps an f32 master of every half param.
func TrainingStep(g *ir.Graph, opt Optimizer) (*ir.Graph, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if g, err = ApplyPrecision(g, opt); err != nil {
		return nil, err
	}
	loss, params, err := stepInputs(g)
	if err != nil {
		return nil, err
	}
	g, seed := scaleLoss(g, loss, opt.LossScale)
	out, grads, err := Grad(g, seed, params)
	if err != nil {
		return nil, err
	}
	applyOptimizer(out, params, grads, opt)
	return out, nil
}

// stepInputs returns the loss (the first output) and the params of a forward graph.
func stepInputs(g *ir.Graph) (ir.ValueID, []ir.ValueID, error) {
	if len(g.Outputs) == 0 {
		return ir.NoValue, nil, fmt.Errorf("graph %s has no output: a training step needs the loss as its first output", g.Name)
	}
	o := g.Outputs[0]
	if lt := g.Value(o.Value).Type; !lt.DType.IsFloat() || lt.Shape.Rank() != 0 {
		return ir.NoValue, nil, ir.Errorf(o.Pos, "the first output %s is the loss and must be a float scalar, is %s", g.Value(o.Value).Name, lt)
	}
	params := g.Leaves(ir.OpParam)
	if len(params) == 0 {
		return ir.NoValue, nil, fmt.Errorf("graph %s has no params to train", g.Name)
	}
	for _, u := range g.Updates {
		if t := g.Value(u.Target); t.Op == ir.OpParam {
			return ir.NoValue, nil, ir.Errorf(u.Pos, "param %s already has an update: the graph is already a training step", t.Name)
		}
	}
	return o.Value, params, nil
}

// applyOptimizer appends the update of every param of g given its gradient.
func applyOptimizer(g *ir.Graph, params, grads []ir.ValueID, opt Optimizer) {
	prec, _ := ParsePrecision(opt.Precision) // withDefaults checked it
	u := &updater{b: newBuilder(g), opt: opt, master: prec.Master, casts: map[[2]ir.ValueID]ir.ValueID{}}
	u.b.shared = ir.RoleOf(ir.RoleUpdate, ir.NoValue)
	u.b.prov = u.b.shared
	if opt.Kind == "adam" {
		u.adamClock(params)
	}
	for k, p := range params {
		u.b.pos = g.Values[p].Pos
		u.b.prov = ir.RoleOf(ir.RoleUpdate, p)
		var next ir.ValueID
		if opt.Kind == "adam" {
			next = u.adam(p, grads[k])
		} else {
			next = u.sgd(p, grads[k])
		}
		g.AddUpdate(p, next, g.Values[p].Pos)
	}
}

type updater struct {
	b   *builder
	opt Optimizer
	// master keeps f32 master weights of half params (Precision.Master).
	master bool
	// bc1, bc2 are Adam's bias corrections 1-β^t, in the clock's dtype.
	bc1, bc2 ir.ValueID
	// casts caches a clock scalar cast to a param dtype, keyed by (value, dtype).
	casts map[[2]ir.ValueID]ir.ValueID
}

func (u *updater) name(p ir.ValueID, suffix string) string {
	return u.b.g.Values[p].Name + "." + suffix
}

func (u *updater) op(p ir.ValueID, suffix string, op ir.Op, args ...ir.ValueID) ir.ValueID {
	return u.b.emit(u.name(p, suffix), op, nil, args...)
}

// state declares zero-initialized optimizer state shaped like p, in dtype dt, named
// <p>.<suffix>.
func (u *updater) state(p ir.ValueID, suffix string, dt ir.DType) ir.ValueID {
	g := u.b.g
	t := ir.Type{DType: dt, Shape: g.Values[p].Type.Shape}
	id, err := g.Declare(ir.OpState, u.b.fresh(u.name(p, suffix)), t, -1, g.Values[p].Pos)
	if err != nil {
		panic("passes: declaring optimizer state: " + err.Error())
	}
	g.SetDerived(id, ir.Prov{Role: ir.RoleState, Of: p, Slot: suffix})
	return id
}

// work returns the dtype the update of p is computed in — f32 for f16 and bf16 params,
// whose range cannot hold Adam's eps or a small squared gradient; the param's own dtype
// otherwise — and p's weight and its gradient in that dtype. Without a master the weight
// is p cast to f32, and finish rounds the new weight back to p's dtype.
//
// With u.master the weight is the f32 master weight <p>.master = f32(p) + <p>.rem, the
// state <p>.rem holding what rounding the master to p's dtype lost. Holding the master as
// that remainder is exact (the rounding error of an f32 to f16/bf16 is an f32, so the sum
// gives the master back bit for bit) and costs the 4 bytes of an f32 master, and
// zero-initialized state is then the master of any param: every path that starts state at
// zero (a fresh Trainer, the serial interpreter, a resume without state) is right as is.
func (u *updater) work(p, grad ir.ValueID) (ir.DType, ir.ValueID, ir.ValueID) {
	dt := u.b.g.Values[p].Type.DType
	if dt != ir.F16 && dt != ir.BF16 {
		return dt, p, u.unscale(p, grad, dt)
	}
	to := ir.Attrs{}.With("to", ir.F32)
	pw := u.b.emit(u.name(p, "f32"), ir.OpCast, to, p)
	if u.master {
		pw = u.op(p, "master", ir.OpAdd, pw, u.state(p, MasterSlot, ir.F32))
	}
	return ir.F32, pw, u.unscale(p, u.b.emit(u.name(p, "grad.f32"), ir.OpCast, to, grad), ir.F32)
}

// unscale divides p's gradient, in dtype dt, by the loss scale (multiplies by 1/S).
func (u *updater) unscale(p, grad ir.ValueID, dt ir.DType) ir.ValueID {
	if s := u.opt.LossScale; s != 0 && s != 1 {
		return u.op(p, "grad.unscaled", ir.OpMul, grad, u.b.scalar(dt, 1/s))
	}
	return grad
}

// finish computes p - lr·step in the work dtype and rounds it to p's dtype; with a
// master it also updates the remainder: <p>.rem' = master' - f32(p').
func (u *updater) finish(p, pw, step ir.ValueID, wt ir.DType) ir.ValueID {
	dt := u.b.g.Values[p].Type.DType
	suffix := "next"
	if dt != wt {
		suffix = "next." + wt.String()
		if u.master {
			suffix = "master.next"
		}
	}
	full := u.op(p, suffix, ir.OpSub, pw, u.op(p, "step", ir.OpMul, step, u.b.scalar(wt, u.opt.LR)))
	if dt == wt {
		return full
	}
	next := u.b.emit(u.name(p, "next"), ir.OpCast, ir.Attrs{}.With("to", dt), full)
	if u.master {
		rem := u.b.g.Values[pw].Args[1]
		back := u.b.emit(u.name(p, "next.f32"), ir.OpCast, ir.Attrs{}.With("to", wt), next)
		u.b.g.AddUpdate(rem, u.op(p, "rem.next", ir.OpSub, full, back), u.b.pos)
	}
	return next
}

// sgd: g' = g + wd·p; with momentum m' = mu·m + g', step = m', else step = g'; p' = p - lr·step.
func (u *updater) sgd(p, grad ir.ValueID) ir.ValueID {
	wt, pw, grad := u.work(p, grad)
	k := func(v float64) ir.ValueID { return u.b.scalar(wt, v) }
	if u.opt.WeightDecay > 0 {
		grad = u.op(p, "decayed", ir.OpAdd, grad, u.op(p, "decay", ir.OpMul, pw, k(u.opt.WeightDecay)))
	}
	step := grad
	if u.opt.Momentum > 0 {
		m := u.state(p, "m", wt)
		step = u.op(p, "m.next", ir.OpAdd, u.op(p, "m.decay", ir.OpMul, m, k(u.opt.Momentum)), grad)
		u.b.g.AddUpdate(m, step, u.b.pos)
	}
	return u.finish(p, pw, step, wt)
}

// adamClock declares the step counter adam.t, advances it, and computes the bias
// corrections 1-β1^t and 1-β2^t (as exp(t·ln β), ir having no pow). The counter has the
// widest float dtype of the params, so an f64 model steps exactly.
func (u *updater) adamClock(params []ir.ValueID) {
	g := u.b.g
	dt := ir.F32
	for _, p := range params {
		if g.Values[p].Type.DType == ir.F64 {
			dt = ir.F64
		}
	}
	u.b.pos = ir.Pos{}
	t, err := g.Declare(ir.OpState, u.b.fresh("adam.t"), ir.Type{DType: dt}, -1, ir.Pos{})
	if err != nil {
		panic("passes: declaring adam.t: " + err.Error())
	}
	g.SetDerived(t, ir.Prov{Role: ir.RoleState, Of: ir.NoValue, Slot: "t"})
	next := u.b.emit("adam.t.next", ir.OpAdd, nil, t, u.b.scalar(dt, 1))
	g.AddUpdate(t, next, ir.Pos{})
	corr := func(name string, beta float64) ir.ValueID {
		pow := u.b.emit(name+".pow", ir.OpExp, nil, u.b.emit(name+".log", ir.OpMul, nil, next, u.b.scalar(dt, math.Log(beta))))
		return u.b.emit(name, ir.OpSub, nil, u.b.scalar(dt, 1), pow)
	}
	u.bc1, u.bc2 = corr("adam.bc1", u.opt.Beta1), corr("adam.bc2", u.opt.Beta2)
}

// inDType returns the clock scalar v in dtype dt.
func (u *updater) inDType(v ir.ValueID, dt ir.DType) ir.ValueID {
	g := u.b.g
	if g.Values[v].Type.DType == dt {
		return v
	}
	key := [2]ir.ValueID{v, ir.ValueID(dt)}
	if c, ok := u.casts[key]; ok {
		return c
	}
	c := u.b.emitAs(u.b.shared, g.Values[v].Name+"."+dt.String(), ir.OpCast, ir.Attrs{}.With("to", dt), v)
	u.casts[key] = c
	return c
}

// adam: m' = β1·m + (1-β1)·g; v' = β2·v + (1-β2)·g²; p' = p - lr·(m̂/(√v̂ + eps) + wd·p)
// with m̂ = m'/(1-β1^t), v̂ = v'/(1-β2^t).
func (u *updater) adam(p, grad ir.ValueID) ir.ValueID {
	g, o := u.b.g, u.opt
	dt, pw, grad := u.work(p, grad)
	k := func(v float64) ir.ValueID { return u.b.scalar(dt, v) }
	m, v := u.state(p, "m", dt), u.state(p, "v", dt)
	mNext := u.op(p, "m.next", ir.OpAdd, u.op(p, "m.decay", ir.OpMul, m, k(o.Beta1)), u.op(p, "m.in", ir.OpMul, grad, k(1-o.Beta1)))
	g2 := u.op(p, "g2", ir.OpMul, grad, grad)
	vNext := u.op(p, "v.next", ir.OpAdd, u.op(p, "v.decay", ir.OpMul, v, k(o.Beta2)), u.op(p, "v.in", ir.OpMul, g2, k(1-o.Beta2)))
	g.AddUpdate(m, mNext, u.b.pos)
	g.AddUpdate(v, vNext, u.b.pos)
	mhat := u.op(p, "mhat", ir.OpDiv, mNext, u.inDType(u.bc1, dt))
	vhat := u.op(p, "vhat", ir.OpDiv, vNext, u.inDType(u.bc2, dt))
	den := u.op(p, "den", ir.OpAdd, u.op(p, "vhat.sqrt", ir.OpSqrt, vhat), k(o.Eps))
	step := u.op(p, "dir", ir.OpDiv, mhat, den)
	if o.WeightDecay > 0 {
		step = u.op(p, "decayed", ir.OpAdd, step, u.op(p, "decay", ir.OpMul, pw, k(o.WeightDecay)))
	}
	return u.finish(p, pw, step, dt)
}

// Autodiff is the "autodiff" phase: the gradient of the loss (first output) with
// respect to every param, returned as extra outputs after the graph's own, in param order,
// so that --dump autodiff shows them and the runtime's check can compare them. lossScale
// (Optimizer.LossScale; 0 or 1: none) multiplies the loss the backward starts from. g is
// not modified. Autodiff then ApplyOptimizer is TrainingStep.
func Autodiff(g *ir.Graph, lossScale float64) (*ir.Graph, error) {
	loss, params, err := stepInputs(g)
	if err != nil {
		return nil, err
	}
	g, seed := scaleLoss(g, loss, lossScale)
	out, grads, err := Grad(g, seed, params)
	if err != nil {
		return nil, err
	}
	for _, gr := range grads {
		out.AddOutput(gr, ir.Pos{})
	}
	return out, nil
}

// ApplyOptimizer is the "optimizer" phase: it takes the gradient outputs Autodiff
// appended back off the outputs and appends opt's update of every param. g is not modified.
func ApplyOptimizer(g *ir.Graph, opt Optimizer) (*ir.Graph, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	params := g.Leaves(ir.OpParam)
	n := len(g.Outputs) - len(params)
	if len(params) == 0 || n < 1 {
		return nil, fmt.Errorf("graph %s has no gradient outputs to apply: run autodiff first", g.Name)
	}
	grads := make([]ir.ValueID, len(params))
	for k, p := range params {
		gr := g.Outputs[n+k].Value
		gv, pv := g.Value(gr), g.Value(p)
		if gv.Prov != ir.RoleOf(ir.RoleGrad, p) || !gv.Type.Equal(pv.Type) {
			return nil, fmt.Errorf("output %d is %s, not the gradient of param %s: run autodiff first", n+k, gv.Name, pv.Name)
		}
		grads[k] = gr
	}
	out := g.Clone()
	out.Outputs = out.Outputs[:n]
	applyOptimizer(out, params, grads, opt)
	return out, nil
}
