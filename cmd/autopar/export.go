package main

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar/export"
)

type exportFlags struct {
	format string
	out    string
}

// newExportCmd is `autopar export`: a plan handed to the user's framework.
func newExportCmd() *cobra.Command {
	var f exportFlags
	cmd := &cobra.Command{
		Use:   "export PLAN.json --format jax|dtensor|megatron [-o FILE]",
		Short: "write a plan for JAX (PartitionSpecs), PyTorch (DTensor placements) or Megatron-LM (launch arguments)",
		Long: `Reads a plan.json written by autopar compile and writes it for another framework:

  jax       a Python module: per pipeline stage a jax.sharding.Mesh with axes 'x' and 'y'
            over its devices, and per parameter, data input, optimizer state and forward
            activation its stage and PartitionSpec, with helpers that make the
            NamedShardings, place the parameters and constrain activations;
  dtensor   a Python module: per stage a DeviceMesh over its ranks, and per parameter,
            data input and optimizer state its DTensor placements (one per mesh axis),
            with helpers that build the meshes and distribute the parameters;
  megatron  the Megatron-LM arguments (--tensor-model-parallel-size,
            --pipeline-model-parallel-size, --micro-batch-size, --global-batch-size,
            --sequence-parallel, --num-layers, ...) when the plan is one Megatron runs:
            a transformer whose stages hold as many blocks on as many devices, each
            stage's weights split over one tensor-parallel group by columns or rows and
            its data over the rest. Otherwise an error lists every reason it is not.

The output goes to -o FILE, written whole or not at all, or to standard output.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runExport(cmd.OutOrStdout(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.format, "format", "", "the framework: jax, dtensor or megatron")
	fl.StringVarP(&f.out, "output", "o", "", "write to `FILE` instead of standard output")
	_ = cmd.MarkFlagRequired("format")
	return cmd
}

func runExport(stdout io.Writer, path string, f exportFlags) error {
	format, err := export.ParseFormat(f.format)
	if err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	p, err := readPlanFile(path)
	if err != nil {
		return err
	}
	ep, err := p.Export(filepath.Base(path))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var buf bytes.Buffer
	if err := export.Write(&buf, ep, format); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if f.out == "" {
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	if err := writeFileAtomic(f.out, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", f.out)
	return nil
}
