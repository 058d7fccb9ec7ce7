package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/safetensors"
	"github.com/autopar/autopar/units"
)

// loopOpts is what the one training loop of the CLI (run and exec, in process or one MPI
// rank per device) takes.
type loopOpts struct {
	steps int
	seed  int64
	check bool
	tol   float64
	// tolAuto: --tolerance was not given; the Trainer picks it from the step's precision.
	tolAuto    bool
	trace      string
	traceFrees bool
	timeout    time.Duration
	weights    string
	save       string
	saveEvery  int
	resume     string
	// checkpoint is resume's, when the caller read it already.
	checkpoint *autopar.Checkpoint
	// programs are the saved programs exec runs (nil: the plan's).
	programs []*program.Program
	// group, for MPI, is this rank's runtime.Group; lead says whether this process prints
	// and writes files (rank 0).
	group runtime.Group
	lead  bool
	// where ends the "running N programs" line.
	where string
	// counters prints each device's counters of the last step beside codegen's prediction.
	counters bool
}

// tolerance is the Trainer's: 0 (its default for the step's precision) unless given.
func (o *loopOpts) tolerance() float64 {
	if o.tolAuto {
		return 0
	}
	return o.tol
}

// validate refuses bad counts and bounds before anything is compiled or started.
func (o *loopOpts) validate() error {
	if o.steps < 1 {
		return fmt.Errorf("--steps must be at least 1, got %d", o.steps)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--timeout %v: expected a positive duration, e.g. 30s", o.timeout)
	}
	if !o.tolAuto && (!(o.tol > 0) || math.IsInf(o.tol, 0)) {
		return fmt.Errorf("--tolerance %v: expected a finite relative difference > 0, e.g. 1e-4", o.tol)
	}
	if o.saveEvery < 0 || (o.saveEvery > 0 && o.save == "") {
		return fmt.Errorf("--save-every %d needs --save FILE and a count of at least 1", o.saveEvery)
	}
	if o.weights != "" && o.resume != "" {
		return fmt.Errorf("--weights and --resume both set the params: give one")
	}
	return nil
}

// trainLoop trains plan's model with an autopar.Trainer (params and state resident on the
// devices; --check is its CheckSerial) for o.steps steps on the data of o.seed, printing
// each loss to out, and writes the trace and checkpoints asked for. Over MPI every rank
// runs it; only the lead's out is not io.Discard, and only the lead writes files.
func trainLoop(ctx context.Context, out io.Writer, plan *autopar.Plan, o loopOpts) error {
	if err := o.validate(); err != nil {
		return err
	}
	opts := autopar.TrainerOptions{Seed: o.seed, CheckSerial: o.check, Tolerance: o.tolerance(), Timeout: o.timeout, Programs: o.programs, Group: o.group,
		CPUTime: runtime.CPUTimeSupported && o.group == nil}
	opts.Checkpoint = o.checkpoint
	if o.resume != "" && o.checkpoint == nil {
		ck, err := autopar.LoadCheckpoint(o.resume)
		if err != nil {
			return err
		}
		opts.Checkpoint = ck
	}
	if o.weights != "" {
		w, _, err := safetensors.ReadFile(o.weights)
		if err != nil {
			return err
		}
		opts.Weights = w
	}
	tr, err := interruptible(ctx, func() (*autopar.Trainer, error) { return autopar.NewTrainer(ctx, plan, opts) })
	if err != nil {
		if o.weights != "" {
			return fmt.Errorf("%s: %w", o.weights, err)
		}
		return err
	}
	data, err := interp.GenerateInputs(plan.Forward(), o.seed+1)
	if err != nil {
		return err
	}
	batch := autopar.Batch{}
	for name, x := range data {
		batch[name] = x
	}
	if o.resume != "" {
		fmt.Fprintf(out, "\nresumed %s at step %d\n", o.resume, tr.Steps())
	}
	fmt.Fprintf(out, "\nrunning %d programs %s\n", tr.Devices(), o.where)
	last := tr.Steps() + o.steps
	var measured []autopar.MeasuredStep
	for tr.Steps() < last {
		if o.trace != "" && tr.Steps() == last-1 {
			tr.TraceNext()
		}
		start := time.Now()
		loss, err := tr.Step(ctx, batch)
		if err != nil {
			return err
		}
		step := tr.Steps()
		if r := tr.LastResult(); r != nil {
			m, err := tr.Measured()
			if err != nil {
				m = autopar.Measure(plan, r) // the wall clock still holds
			}
			measured = append(measured, m)
		}
		fmt.Fprintf(out, "step %4d  loss %.6f  (%v)\n", step, loss, time.Since(start).Round(time.Millisecond))
		if math.IsNaN(loss) || math.IsInf(loss, 0) {
			return fmt.Errorf("step %d: the loss is %v; training diverged (try a smaller --lr)", step, loss)
		}
		if c := tr.LastCheck(); o.check && c != nil { // over MPI, rank 0 checks
			fmt.Fprintf(out, "      check: loss %s; gradients %s; params %s\n", diffString(c.Loss), diffString(c.Grads), diffString(c.Updates))
		}
		if step == last && o.trace != "" && o.lead {
			write := func(w io.Writer) error {
				return tr.LastResult().WriteTraceWith(w, runtime.TraceOptions{Frees: o.traceFrees, Stages: stageDevices(plan)})
			}
			if err := writeFileAtomic(o.trace, write); err != nil {
				return err
			}
		}
		if o.save != "" && (step == last || (o.saveEvery > 0 && step%o.saveEvery == 0)) {
			if err := tr.Save(o.save); err != nil { // every rank gathers; the lead writes
				return err
			}
			fmt.Fprintf(out, "      saved %s at step %d\n", o.save, step)
		}
	}
	printMeasured(out, plan, measured)
	if o.counters {
		progs := o.programs
		if progs == nil {
			if progs, err = plan.Programs(); err != nil {
				return err
			}
		}
		printCounters(out, progs, tr.LastResult())
	}
	return nil
}

// printMeasured sets the plan's predicted step time beside the measured one, and each
// stage's predicted compute and communication beside what its devices spent. The first
// step warms up (allocations, caches) and is left out when there are others.
//
// What is compared with the prediction is the step in CPU time (autopar.MeasuredStep's
// CPUStep: one core per device, each instruction taking what its device's thread spent on
// it, replayed along the programs' dependencies), which is what a prediction describes and
// holds still on a shared machine; the wall clock is shown beside it, labelled, and is what
// this machine took with whatever else ran (and with fewer cores than devices, if so).
// Without CPU times (not Linux, or over MPI), or on a cluster whose devices share cores
// (host_cores: the cpu preset prices this machine's wall clock), the wall clock is
// compared.
func printMeasured(w io.Writer, p *autopar.Plan, steps []autopar.MeasuredStep) {
	if len(steps) == 0 {
		return
	}
	if len(steps) > 1 {
		steps = steps[1:]
	}
	// A cluster whose devices share cores (host_cores, the cpu preset) prices the wall
	// clock of this machine; a calibrated one, a core per device: the CPU-time step.
	cpu := p.Cluster.HostCores == 0
	for _, s := range steps {
		cpu = cpu && s.CPUStages != nil && s.CPUStep > 0
	}
	pr := p.Predicted
	ratio := func(x float64) string {
		if pr.StepTime > 0 {
			return fmt.Sprintf("%.2f", x/pr.StepTime)
		}
		return "-"
	}
	var m autopar.MeasuredStep
	if cpu {
		m = autopar.MedianCPUStep(steps)
		wall := autopar.MedianStep(steps)
		fmt.Fprintf(w, "\nstep time: predicted %s, measured %s CPU time (measured/predicted %s; median of %d steps: one core per device, each device's thread CPU time replayed along the programs' dependencies); wall clock %s (busiest device, on this machine as loaded)\n",
			units.Seconds(pr.StepTime), units.Seconds(m.CPUStep), ratio(m.CPUStep), len(steps), units.Seconds(wall.Step))
	} else {
		m = autopar.MedianStep(steps)
		fmt.Fprintf(w, "\nstep time: predicted %s, measured %s wall clock (measured/predicted %s; median of %d steps, busiest device on the runtime's counters)\n",
			units.Seconds(pr.StepTime), units.Seconds(m.Step), ratio(m.Step), len(steps))
		if c := autopar.MedianCPUStep(steps); c.CPUStep > 0 {
			fmt.Fprintf(w, "  (in CPU time, one core per device: %s)\n", units.Seconds(c.CPUStep))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	what, stages := "wall", m.Stages
	if cpu {
		what, stages = "CPU", m.CPUStages
	}
	fmt.Fprintf(tw, "stage\tpredicted compute\tpredicted communication\t%s compute\t%s communication\t%s other\n", what, what, what)
	B := float64(p.Microbatches)
	for i, s := range p.Stages {
		compute, comm := s.MicrobatchSplit()
		compute, comm = B*compute+s.StepTime-s.StepComm, B*comm+s.StepComm // and the once-per-step part
		t := stages[i]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i, units.Seconds(compute), units.Seconds(comm),
			units.Seconds(t.Compute), units.Seconds(t.Communication), units.Seconds(t.Other))
	}
	tw.Flush()
	if cpu {
		fmt.Fprintln(w, "per step (its micro-batches and the once-per-step part), mean over each stage's devices, in their threads' CPU time (waiting costs none; a span of work is split over its kinds by wall time); other: loads, stores, frees")
	} else {
		fmt.Fprintln(w, "per step (its micro-batches and the once-per-step part), mean over each stage's devices; measured communication includes waiting for peers; other: loads, stores, frees")
	}
}
