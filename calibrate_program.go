package autopar

import (
	"fmt"
	"math"
	"sort"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/interp"
)

// programOverhead is the rest of an instruction's overhead that only a real program
// shows: results of many sizes allocated and freed under a live heap, the Go runtime's
// garbage-collection assists on the devices' threads, N devices' instruction streams
// sharing the caches, the runtime's loop between instructions. It compiles the zoo's tiny
// MLP (every device in one data-parallel stage) on the cluster measured so far, runs it
// on the runtime in CPU time (runtime.CPUStep, after warm-up steps), and returns the
// difference between the measured step and the plan's prediction over the instructions
// the busiest device ran that the plan prices (all but frees, which are priced in the
// instruction whose result they free, and communication, priced by its own fits): what
// to add to KernelOverhead, at least −KernelOverhead/2 (noise must not price an
// instruction at nothing). The MLP is small enough that its step is mostly instruction
// overhead, so the difference is that overhead's, not the kernels' rates.
func (c *calibrator) programOverhead(cl *mesh.Cluster) float64 {
	if c.err != nil || c.ctx.Err() != nil {
		return 0
	}
	fail := func(err error) float64 {
		c.err = fmt.Errorf("calibrate: the program overhead's run: %w", err)
		return 0
	}
	m, err := zoo.New("mlp")
	if err != nil {
		return fail(err)
	}
	g, err := m.Build()
	if err != nil {
		return fail(err)
	}
	opts := Options{Microbatches: 2}
	if c.n > 1 {
		opts.Manual = &Manual{DP: c.n, TP: 1, PP: 1}
	}
	p, err := Compile(c.ctx, g, cl, opts)
	if err != nil {
		return fail(err)
	}
	tr, err := NewTrainer(c.ctx, p, TrainerOptions{Seed: 1, CPUTime: true})
	if err != nil {
		return fail(err)
	}
	data, err := interp.GenerateInputs(p.Forward(), 100)
	if err != nil {
		return fail(err)
	}
	batch := Batch{}
	for name, x := range data {
		batch[name] = x
	}
	warm, steps := 3, 25
	if c.quick {
		warm, steps = 1, 3
	}
	var ts []float64
	instrs := 0
	for i := range warm + steps {
		if _, err := tr.Step(c.ctx, batch); err != nil {
			return fail(err)
		}
		if i < warm {
			continue
		}
		ms, err := tr.Measured()
		if err != nil {
			return fail(err)
		}
		ts = append(ts, ms.CPUStep)
		for _, d := range tr.LastResult().Devices {
			n := d.Instrs - d.Count[program.Free]
			for _, k := range []program.Kind{program.AllReduce, program.AllGather, program.ReduceScatter,
				program.AllToAll, program.Send, program.Recv} {
				n -= d.Count[k]
			}
			instrs = max(instrs, n)
		}
	}
	sort.Float64s(ts)
	measured, predicted := ts[len(ts)/2], p.Predicted.StepTime
	delta := math.Max((measured-predicted)/float64(max(1, instrs)), -cl.KernelOverhead/2)
	c.logf("program (mlp, %d devices)  %8.2f µs measured, %8.2f µs predicted, %d instructions: %+.2f µs each",
		c.n, measured*1e6, predicted*1e6, instrs, delta*1e6)
	return delta
}
