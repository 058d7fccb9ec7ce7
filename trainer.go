package autopar

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
	"github.com/autopar/autopar/safetensors"
)

// Batch holds one step's data inputs by name. A value is a []float32, []float64, []int32
// or []int64 holding the input's elements in row-major order (its length the number of
// elements), or a *kernels.Tensor of the input's exact type. Float inputs take float
// slices, integer and bool inputs integer slices.
type Batch map[string]any

// TrainerOptions configure NewTrainer.
type TrainerOptions struct {
	// Seed seeds the params' init (interp.InitParams: the serial interpreter's values for
	// the same seed). Ignored when Checkpoint is set.
	Seed int64
	// Checkpoint, if set, is where training resumes: its params, optimizer state and step
	// count, under any plan of the same model and optimizer.
	Checkpoint *Checkpoint
	// CheckSerial runs the serial interpreter beside every step, on the same params and
	// batch, and fails the step when the loss or an updated tensor differs by more than
	// Tolerance relative to the largest magnitude of that tensor. Over a Group the lead
	// runs the serial step; the other processes only take part in the gathers.
	CheckSerial bool
	// Tolerance is CheckSerial's bound; 0 means 1e-4 (f32 reductions in another order), or
	// 2e-2 for a step that computes in f16 or bf16 (a few ulps of 2⁻⁸: partial sums are
	// rounded to the half dtype where the serial step rounds once).
	Tolerance float64
	// Timeout bounds each device wait (runtime.Options.Timeout); 0 means the runtime's.
	Timeout time.Duration
	// CPUTime measures each step's instructions in their devices' thread CPU time too
	// (runtime.Options.CPUTime), for Measured's CPUStep: each device then computes on
	// one core.
	CPUTime bool
	// Transport carries the steps' collectives; nil means a fresh in-process one per step.
	Transport runtime.Transport
	// Group, if set, runs the steps with this process holding only its own devices (one
	// MPI rank per device: runtime/mpi's Session). Every process of the group makes the
	// same calls on its Trainer with the same batches; Save writes from the group's lead.
	Group runtime.Group
	// Programs, if set, are the plan's programs as saved (autopar compile --emit
	// programs); nil lowers the plan.
	Programs []*program.Program
	// Weights, if set, replace the initial values of the params they name (as autopar
	// import's safetensors hold them); each must be a param of the model with its type.
	Weights map[string]*kernels.Tensor
}

// SerialCheck is what CheckSerial measured on one step: per kind, the largest absolute
// difference from the serial interpreter and that over the kind's largest magnitude.
type SerialCheck struct {
	Step                 int
	Loss, Grads, Updates Diff
}

// Diff is the largest absolute difference over a kind of tensors, the largest magnitude,
// and the tensor where it was largest.
type Diff struct {
	Abs, Scale float64
	Worst      string
}

// Rel is Abs over Scale (0 when both are 0).
func (d Diff) Rel() float64 {
	if d.Scale == 0 {
		return 0
	}
	return d.Abs / d.Scale
}

func (d *Diff) add(name string, got, want *kernels.Tensor) {
	for i := range want.Len() {
		x, y := got.At(i), want.At(i)
		if e := math.Abs(x - y); e > d.Abs || math.IsNaN(e) {
			d.Abs, d.Worst = e, name
		}
		d.Scale = max(d.Scale, math.Abs(x), math.Abs(y))
	}
}

// Trainer trains a model under a plan: it keeps the params and optimizer state on the
// devices, sharded as the plan says, and runs one training step per Step call with only
// the data inputs coming from the caller.
type Trainer struct {
	plan *Plan
	full *ir.Graph // the full-batch training step, for init, inputs and the serial check
	// masters maps the master-weight remainders of full to their params
	// (passes.MasterRemainders): the serial check compares them with the params.
	masters map[ir.ValueID]ir.ValueID
	sess    *runtime.Session
	progs   []*program.Program
	loss    string
	inputs  []*ir.Value // the data inputs, by name
	params  []string    // the params' names, sorted
	step    int
	opts    TrainerOptions
	last    *runtime.Result
	check   *SerialCheck
	// devices is the number of programs.
	devices int
	// traceNext asks the next step for a trace.
	traceNext bool
}

// NewTrainer places the initial params and optimizer state of plan's model on the plan's
// devices: from opts.Checkpoint when set, else from the model's init attributes with
// opts.Seed.
func NewTrainer(ctx context.Context, plan *Plan, opts TrainerOptions) (*Trainer, error) {
	if plan == nil || plan.Forward() == nil {
		return nil, fmt.Errorf("trainer: no plan: compile one or read it with ReadPlan")
	}
	full, err := passes.TrainingStep(plan.Forward(), plan.Optimizer.Optimizer())
	if err != nil {
		return nil, err
	}
	if opts.Tolerance <= 0 {
		opts.Tolerance = defaultTolerance(full)
	}
	progs := opts.Programs
	if progs == nil {
		if progs, err = plan.Programs(); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	state := interp.InitParams(full, opts.Seed)
	step := 0
	if opts.Weights != nil {
		if _, err := safetensors.Apply(full, state, opts.Weights); err != nil {
			return nil, err
		}
	}
	if ck := opts.Checkpoint; ck != nil {
		if err := ck.fits(plan, state); err != nil {
			return nil, err
		}
		for name, x := range ck.Tensors {
			state[name] = x
		}
		step = ck.Step
	}
	sess, err := runtime.NewGroupSession(progs, runtime.Data(state), runtime.Options{Timeout: opts.Timeout, Transport: opts.Transport, CPUTime: opts.CPUTime}, opts.Group)
	if err != nil {
		return nil, err
	}
	t := &Trainer{plan: plan, full: full, masters: passes.MasterRemainders(full), sess: sess, progs: progs, loss: full.Value(full.Outputs[0].Value).Name, step: step, opts: opts, devices: len(progs)}
	for i := range full.Values {
		v := &full.Values[i]
		switch v.Op {
		case ir.OpInput:
			t.inputs = append(t.inputs, v)
		case ir.OpParam:
			t.params = append(t.params, v.Name)
		}
	}
	slices.SortFunc(t.inputs, func(a, b *ir.Value) int { return cmpString(a.Name, b.Name) })
	slices.Sort(t.params)
	return t, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Steps returns the number of steps trained, counting those of the checkpoint resumed.
func (t *Trainer) Steps() int { return t.step }

// Devices returns the number of devices (programs) the trainer runs on.
func (t *Trainer) Devices() int { return t.devices }

// Plan returns the plan the trainer runs.
func (t *Trainer) Plan() *Plan { return t.plan }

// Inputs returns the data inputs a Batch must hold, with their types, by name.
func (t *Trainer) Inputs() map[string]ir.Type {
	out := map[string]ir.Type{}
	for _, v := range t.inputs {
		out[v.Name] = v.Type
	}
	return out
}

// TraceNext makes the next step record a trace of every instruction in LastResult.
func (t *Trainer) TraceNext() { t.traceNext = true }

// LastResult returns the runtime's result of the last step (its counters, its trace), or
// nil before the first.
func (t *Trainer) LastResult() *runtime.Result { return t.last }

// Hosted returns the params and state the programs cannot keep on the devices (see
// runtime.Session), which move through the host every step: none for programs codegen
// lowers today, which store every update where the next step loads it.
func (t *Trainer) Hosted() []string { return t.sess.Hosted() }

// Step runs one training step on batch and returns its loss. On an error the params and
// state are unchanged, except after a CheckSerial mismatch, which is found once the step
// has been applied (Steps counts it).
func (t *Trainer) Step(ctx context.Context, batch Batch) (float64, error) {
	data, err := t.feeds(batch)
	if err != nil {
		return 0, err
	}
	var want *interp.Result
	outputs := []string{t.loss}
	if t.opts.CheckSerial {
		feeds, err := t.sess.Gather(ctx)
		if err != nil {
			return 0, err
		}
		maps.Copy(feeds, data)
		if t.sess.Lead() {
			if want, err = interp.RunKeep(ctx, t.full, interp.Feeds(feeds)); err != nil {
				return 0, fmt.Errorf("trainer: step %d: serial check: %w", t.step+1, err)
			}
		}
		outputs = append(outputs, t.gradNames()...)
	}
	t.sess.SetTrace(t.traceNext)
	t.traceNext = false
	res, err := t.sess.Step(ctx, data, outputs...)
	if err != nil {
		return 0, fmt.Errorf("trainer: step %d: %w", t.step+1, err)
	}
	loss, ok := res.Stores[t.loss]
	if !ok {
		return 0, fmt.Errorf("trainer: step %d: the programs did not store the loss %s", t.step+1, t.loss)
	}
	t.step++
	t.last = res
	if t.opts.CheckSerial {
		if err := t.checkSerial(ctx, res.Stores, want); err != nil {
			return 0, err
		}
	}
	return loss.At(0), nil
}

// gradNames returns the names of the params' gradients the step computes.
func (t *Trainer) gradNames() []string {
	var out []string
	gradOf := t.full.ByRole(ir.RoleGrad)
	for _, p := range t.params {
		if id, ok := t.full.Lookup(p); ok && gradOf[id] != ir.NoValue {
			out = append(out, t.full.Value(gradOf[id]).Name)
		}
	}
	return out
}

// LastCheck returns what CheckSerial measured on the last step (nil without CheckSerial, and
// on the processes of a group other than its lead, which alone runs the serial step).
func (t *Trainer) LastCheck() *SerialCheck { return t.check }

// checkSerial compares the step's loss, gradients and updated tensors with the serial
// run's, records the differences, and fails past the tolerance.
//
// Over a group every process takes part in the gathers, and the lead alone (want != nil)
// runs the serial step and compares.
func (t *Trainer) checkSerial(ctx context.Context, stores map[string]*kernels.Tensor, want *interp.Result) error {
	got, err := t.sess.Gather(ctx)
	if err != nil || want == nil {
		return err
	}
	loss := stores[t.loss]
	got[t.loss] = loss
	wantAll := map[string]*kernels.Tensor{t.loss: want.Outputs[0]}
	maps.Copy(wantAll, want.Updates)
	c := &SerialCheck{Step: t.step}
	c.Loss.add(t.loss, loss, want.Outputs[0])
	for _, name := range t.gradNames() {
		id, _ := t.full.Lookup(name)
		if g, w := stores[name], want.Values[id]; g != nil && w != nil && g.Len() == w.Len() {
			c.Grads.add(name, g, w)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want.Updates)) {
		if g := got[name]; g != nil && g.Len() == want.Updates[name].Len() {
			c.Updates.add(name, g, want.Updates[name])
		}
	}
	t.check = c
	if err := t.compare(got, wantAll, t.opts.Tolerance); err != nil {
		return fmt.Errorf("trainer: step %d: serial check: %w", t.step, err)
	}
	return nil
}

// defaultTolerance is CheckSerial's bound for step: 2e-2 when a param is f16 or bf16,
// 1e-4 otherwise.
func defaultTolerance(step *ir.Graph) float64 {
	for _, p := range step.Leaves(ir.OpParam) {
		if dt := step.Value(p).Type.DType; dt == ir.F16 || dt == ir.BF16 {
			return 2e-2
		}
	}
	return 1e-4
}

// compare checks got against want, tensor by tensor, in groups: the loss, the params, and
// each kind of optimizer state. A tensor fails when its largest absolute difference passes
// tol times the largest magnitude of its group: element-wise or per-tensor ratios would
// report rounding noise as error where values cancel (the gradient of attention's key bias
// is zero in exact arithmetic, so both runs hold noise there), as run --check prints.
func (t *Trainer) compare(got, want map[string]*kernels.Tensor, tol float64) error {
	group := func(name string) string {
		id, ok := t.full.Lookup(name)
		if !ok {
			return name
		}
		switch v := t.full.Value(id); v.Op {
		case ir.OpParam:
			return "params"
		case ir.OpState:
			if _, ok := t.masters[id]; ok {
				return "params" // the low part of a master weight: rounding-sized, at the weight's scale
			}
			if v.Prov.Slot != "" {
				return "state ." + v.Prov.Slot // every param's Adam m together, its v apart
			}
			return "state " + name
		}
		return name
	}
	scale := map[string]float64{}
	for name, w := range want {
		g := got[name]
		if g == nil || g.Len() != w.Len() {
			return fmt.Errorf("%s is missing or of another size", name)
		}
		k := group(name)
		for i := range w.Len() {
			scale[k] = max(scale[k], math.Abs(g.At(i)), math.Abs(w.At(i)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		abs, _ := kernels.MaxAbsDiff(got[name], want[name])
		s := scale[group(name)]
		if abs > tol*s || math.IsNaN(abs) {
			return fmt.Errorf("%s differs by %.3g, past %g of the largest magnitude %.3g of its group (%s)", name, abs, tol, s, group(name))
		}
	}
	return nil
}

// feeds converts a batch into tensors, checking it names exactly the data inputs with
// their types.
func (t *Trainer) feeds(batch Batch) (runtime.Data, error) {
	data := runtime.Data{}
	for _, v := range t.inputs {
		x, ok := batch[v.Name]
		if !ok || x == nil {
			return nil, fmt.Errorf("trainer: the batch has no input %s, expected %s", v.Name, v.Type)
		}
		tensor, err := toTensor(v, x)
		if err != nil {
			return nil, err
		}
		data[v.Name] = tensor
	}
	for _, name := range slices.Sorted(maps.Keys(batch)) {
		if _, ok := data[name]; !ok {
			return nil, fmt.Errorf("trainer: the batch has %s, which is not a data input of %s (inputs: %s)", name, t.plan.Model, t.inputList())
		}
	}
	return data, nil
}

func (t *Trainer) inputList() string {
	s := ""
	for i, v := range t.inputs {
		if i > 0 {
			s += ", "
		}
		s += v.Name + ": " + v.Type.String()
	}
	return s
}

// toTensor makes input v's tensor from a batch value, checking its length, dtype and, for
// integer inputs with a limit, its range.
func toTensor(v *ir.Value, x any) (*kernels.Tensor, error) {
	want := v.Type
	n := int(want.Shape.NumElements())
	bad := func(what string) error {
		return fmt.Errorf("trainer: input %s is %s, expected %s (%d elements)", v.Name, what, want, n)
	}
	var out *kernels.Tensor
	switch d := x.(type) {
	case *kernels.Tensor:
		if !d.Type.Equal(want) {
			return nil, bad("a tensor of " + d.Type.String())
		}
		if err := d.Check(); err != nil {
			return nil, fmt.Errorf("trainer: input %s: %w", v.Name, err)
		}
		out = d
	case []float32:
		if !want.DType.IsFloat() || want.DType == ir.F64 {
			return nil, bad(fmt.Sprintf("[]float32 of %d elements", len(d)))
		}
		if len(d) != n {
			return nil, bad(fmt.Sprintf("[]float32 of %d elements", len(d)))
		}
		out = kernels.New(want)
		for i, e := range d {
			out.Set(i, float64(e))
		}
	case []float64:
		if !want.DType.IsFloat() || len(d) != n {
			return nil, bad(fmt.Sprintf("[]float64 of %d elements", len(d)))
		}
		out = kernels.FromF64(want.DType, want.Shape, d)
	case []int32:
		if want.DType.IsFloat() || len(d) != n {
			return nil, bad(fmt.Sprintf("[]int32 of %d elements", len(d)))
		}
		out = kernels.New(want)
		for i, e := range d {
			out.Int[i] = int64(e)
		}
	case []int64:
		if want.DType.IsFloat() || len(d) != n {
			return nil, bad(fmt.Sprintf("[]int64 of %d elements", len(d)))
		}
		out = kernels.New(want)
		copy(out.Int, d)
	default:
		return nil, bad(fmt.Sprintf("a %T", x))
	}
	if out.Int != nil {
		limit, _ := v.Attrs.Get("limit")
		if l, ok := limit.(int); ok && l > 0 {
			for i, e := range out.Int {
				if e < 0 || e >= int64(l) {
					return nil, fmt.Errorf("trainer: input %s holds %d at element %d, expected values in [0, %d) (its limit)", v.Name, e, i, l)
				}
			}
		}
	}
	return out, nil
}

// Params gathers the params from the devices, whole, by name. In a group every process
// must call it.
func (t *Trainer) Params() (map[string]*kernels.Tensor, error) {
	all, err := t.sess.Gather(context.Background())
	if err != nil {
		return nil, err
	}
	out := map[string]*kernels.Tensor{}
	for _, n := range t.params {
		out[n] = all[n]
	}
	return out, nil
}

// State gathers the params and the optimizer state, whole, by name. In a group every
// process must call it.
func (t *Trainer) State() (map[string]*kernels.Tensor, error) {
	all, err := t.sess.Gather(context.Background())
	if err != nil {
		return nil, err
	}
	return all, nil
}

// ParseCluster is mesh.ParseCluster, here so that a training program needs no other
// package to name its cluster: "cpu:4", "p3.16xlarge:2".
func ParseCluster(spec string) (*mesh.Cluster, error) { return mesh.ParseCluster(spec) }
