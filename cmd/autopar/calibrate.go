package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/mesh"
)

type calibrateFlags struct {
	cluster string
	out     string
	quick   bool
	quiet   bool
}

func newCalibrateCmd() *cobra.Command {
	var f calibrateFlags
	cmd := &cobra.Command{
		Use:   "calibrate --cluster cpu:N -o CLUSTER.json",
		Short: "measure the built-in runtime on this machine and write the cpu cluster it makes",
		Long: `Measures the built-in runtime the way Alpa profiles its cluster: the FLOP rates of the
matmul, batched (attention, per-expert) einsum and conv kernels in f32 and f16, the rates of
elementwise and of reduction kernels and the memory bandwidth of layout kernels, the
overhead of one instruction (then corrected on a real program, the zoo's tiny MLP run on N
devices), and alpha and beta of every collective for each group size on the in-process
transport, with N devices computing at once. It writes
a cluster JSON that --cluster FILE reads; compile and run then price plans by what this
machine does. It takes under a minute (--quick: a second, rougher).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCalibrate(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "cpu", "the cluster to measure: cpu or cpu:N (N devices)")
	fl.StringVarP(&f.out, "output", "o", "", "write the cluster JSON to `FILE`")
	fl.BoolVar(&f.quick, "quick", false, "measure small sizes briefly (about a second; rougher numbers)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not print each measurement")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

// calibrateDevices reads --cluster: only the built-in runtime can be measured.
func calibrateDevices(spec string) (int, error) {
	name, count, has := strings.Cut(spec, ":")
	if name != "cpu" {
		return 0, fmt.Errorf("--cluster %q: calibrate measures the built-in runtime, expected cpu or cpu:N", spec)
	}
	if !has {
		return 4, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || count[0] == '+' || n > maxCalibrateDevices {
		return 0, fmt.Errorf("--cluster %q: count after ':' must be an integer from 1 to %d, got %q", spec, maxCalibrateDevices, count)
	}
	return n, nil
}

// maxCalibrateDevices bounds cpu:N for calibrate: each device is a goroutine timing kernels
// and collectives at once.
const maxCalibrateDevices = 256

func runCalibrate(ctx context.Context, stdout io.Writer, f calibrateFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	n, err := calibrateDevices(f.cluster)
	if err != nil {
		return err
	}
	opts := autopar.CalibrateOptions{Devices: n, Quick: f.quick}
	if !f.quiet {
		opts.Report = stdout
	}
	start := time.Now()
	c, err := autopar.Calibrate(ctx, opts)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if _, err := mesh.ParseClusterJSON(data, c.Name); err != nil {
		return fmt.Errorf("calibrate: the cluster written would not read back: %w", err)
	}
	if err := writeFileAtomic(f.out, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (cpu:%d, measured in %v); use it as --cluster %s\n", f.out, n, time.Since(start).Round(time.Millisecond), f.out)
	return nil
}
