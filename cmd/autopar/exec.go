package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/mpi"
)

// stepFlags are the flags of a training loop on the runtime, shared by exec and run over MPI.
type stepFlags struct {
	steps     int
	seed      int64
	check     bool
	tol       float64
	tolAuto   bool // --tolerance not given: the step's precision picks it
	trace     string
	timeout   time.Duration
	transport string
	save      string
	saveEvery int
	resume    string
}

// loop is the training loop's part of the flags.
func (f *stepFlags) loop() loopOpts {
	return loopOpts{steps: f.steps, seed: f.seed, check: f.check, tol: f.tol, tolAuto: f.tolAuto, trace: f.trace, timeout: f.timeout,
		save: f.save, saveEvery: f.saveEvery, resume: f.resume, lead: true, counters: true}
}

func addStepFlags(cmd *cobra.Command, f *stepFlags) {
	fl := cmd.Flags()
	fl.IntVar(&f.steps, "steps", 3, "training steps to run")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the parameter init and the data")
	fl.BoolVar(&f.check, "check", false, "run the serial interpreter beside it, print the differences and fail past --tolerance")
	fl.Float64Var(&f.tol, "tolerance", 1e-4, "with --check, the largest relative difference accepted (2e-2 unless given for a step in f16/bf16)")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome trace (Perfetto) of the last step to `FILE`")
	fl.DurationVar(&f.timeout, "timeout", time.Minute, "how long a device may wait for a peer")
	fl.StringVar(&f.transport, "transport", "auto", "inproc (goroutines), mpi (one process per device, under mpirun), or auto: mpi when started by mpirun")
	fl.StringVar(&f.save, "save", "", "save a checkpoint (params and optimizer state, safetensors) to `FILE` after the last step")
	fl.IntVar(&f.saveEvery, "save-every", 0, "with --save, also save after every `N`th step")
	fl.StringVar(&f.resume, "resume", "", "resume from the checkpoint in `FILE`, saved under any plan of the same model and optimizer")
}

func newExecCmd() *cobra.Command {
	var f stepFlags
	cmd := &cobra.Command{
		Use:   "exec DIR [--steps N] [--check]",
		Short: "train on the programs that compile --emit programs wrote, one MPI rank per device under mpirun",
		Long: `Runs the programs saved by autopar compile -o DIR --emit programs (DIR/plan.json and
DIR/programs/deviceN.json) for --steps training steps, printing the loss of each step and
then each device's counters beside the plan's prediction. Under mpirun
(mpirun -np N autopar exec DIR) rank r runs device r over Open MPI; otherwise the devices
run as goroutines. --check compares every step with the serial interpreter, as run does.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.tolAuto = !cmd.Flags().Changed("tolerance")
			return runExec(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], f)
		},
	}
	addStepFlags(cmd, &f)
	return cmd
}

// useMPI resolves --transport.
func useMPI(transport string) (bool, error) {
	switch transport {
	case "inproc":
		return false, nil
	case "mpi":
		return true, nil
	case "auto", "":
		return os.Getenv("OMPI_COMM_WORLD_SIZE") != "", nil
	}
	return false, fmt.Errorf("--transport %q: expected inproc, mpi or auto", transport)
}

func runExec(ctx context.Context, stdout, stderr io.Writer, dir string, f stepFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	viaMPI, err := useMPI(f.transport)
	if err != nil {
		return err
	}
	o := f.loop()
	if err := o.validate(); err != nil {
		return err
	}
	if !viaMPI {
		plan, progs, _, err := readProgramDir(dir)
		if err != nil {
			return err
		}
		printSummary(stdout, plan)
		o.programs, o.where = progs, "on the built-in runtime"
		return trainLoop(ctx, stdout, plan, o)
	}
	return onMPI(stderr, func(w *mpi.World) error {
		out := stdout
		if w.Rank() != 0 {
			out = io.Discard
		}
		plan, progs, digest, err := readProgramDir(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(digest, "%+v\n", f)
		if err := w.Agree(ctx, f.timeout, "plan.json, programs and flags", digest.Sum(nil)); err != nil {
			return err
		}
		printSummary(out, plan)
		return trainOnRanks(ctx, out, w, plan, progs, o)
	})
}

// onMPI runs body on this rank of an MPI job. An error is printed with the rank and aborts
// the whole job (MPI_Abort), so that no rank waits for one that gave up; success finalizes.
func onMPI(stderr io.Writer, body func(w *mpi.World) error) error {
	w, err := mpi.Init()
	if err != nil {
		return err
	}
	if err := body(w); err != nil {
		fmt.Fprintf(stderr, "autopar: rank %d: %v\n", w.Rank(), err)
		w.Abort(1)
	}
	return w.Finalize()
}

// trainOnRanks trains with this rank as device Rank of progs, its params and state on
// this rank only; only rank 0 writes to out and files.
func trainOnRanks(ctx context.Context, out io.Writer, w *mpi.World, plan *autopar.Plan, progs []*program.Program, o loopOpts) error {
	s, err := w.NewSession(ctx, progs, o.timeout)
	if err != nil {
		return err
	}
	o.programs, o.group, o.lead = progs, s, w.Rank() == 0
	o.where = fmt.Sprintf("on %d MPI ranks, one device each", w.Size())
	return trainLoop(ctx, out, plan, o)
}

var deviceFile = regexp.MustCompile(`^device(\d+)\.json$`)

// readProgramDir reads DIR/plan.json and DIR/programs/device*.json, one program per device
// numbered from 0, and returns them with a hash of every byte read.
func readProgramDir(dir string) (*autopar.Plan, []*program.Program, hashWriter, error) {
	digest := sha256.New()
	path := filepath.Join(dir, "plan.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	digest.Write(data)
	plan, err := autopar.ReadPlanFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	pdir := filepath.Join(dir, "programs")
	entries, err := os.ReadDir(pdir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: expected the programs that autopar compile -o %s --emit programs writes", err, dir)
	}
	var devices []int
	for _, e := range entries {
		if m := deviceFile.FindStringSubmatch(e.Name()); m != nil {
			d, _ := strconv.Atoi(m[1])
			devices = append(devices, d)
		}
	}
	slices.Sort(devices)
	if len(devices) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: no deviceN.json programs, expected those autopar compile --emit programs writes", pdir)
	}
	progs := make([]*program.Program, len(devices))
	for i, d := range devices {
		file := filepath.Join(pdir, fmt.Sprintf("device%d.json", d))
		if d != i {
			return nil, nil, nil, fmt.Errorf("%s: expected device%d.json: the programs must number the devices 0 to %d", file, i, len(devices)-1)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, nil, err
		}
		digest.Write(data)
		if progs[i], err = program.UnmarshalProgram(data); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", file, err)
		}
		if progs[i].Device != program.DeviceID(d) {
			return nil, nil, nil, fmt.Errorf("%s: holds the program of device %d", file, progs[i].Device)
		}
	}
	return plan, progs, digest, nil
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

// printCounters prints each device's peak bytes and traffic of the last step beside what
// codegen predicts for its program.
func printCounters(w io.Writer, progs []*program.Program, res *runtime.Result) {
	pred := codegen.Predict(nil, progs)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "device\tpeak\tsent\treceived\tpredicted\t")
	for i, d := range res.Devices {
		verdict := "equal"
		if p := pred[i]; p.PeakBytes != d.PeakBytes || p.BytesSent != d.BytesSent || p.BytesReceived != d.BytesReceived {
			verdict = fmt.Sprintf("%s, %s, %s", sharding.FormatBytes(p.PeakBytes), sharding.FormatBytes(p.BytesSent), sharding.FormatBytes(p.BytesReceived))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t\n", d.Device, sharding.FormatBytes(d.PeakBytes), sharding.FormatBytes(d.BytesSent), sharding.FormatBytes(d.BytesReceived), verdict)
	}
	tw.Flush()
}
