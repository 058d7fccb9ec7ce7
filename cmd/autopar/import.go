package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/frontend/onnx"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/safetensors"
)

type importFlags struct {
	out, weights string
	opts         onnx.Options
}

func newImportCmd() *cobra.Command {
	var f importFlags
	cmd := &cobra.Command{
		Use:   "import MODEL.onnx -o MODEL.ir [--weights FILE] [--batch N] [--loss cross-entropy --labels NAME]",
		Short: "import an ONNX model (torch.onnx.export) as .ir, with its weights in safetensors",
		Long: `Imports an ONNX model as an autopar .ir file and writes its initializers, the params'
values, beside it as a safetensors file (MODEL.safetensors unless --weights says otherwise),
which autopar run --weights loads. The graph's first output must be a scalar loss, or
--loss cross-entropy --labels NAME adds one over the first output (the logits) and a new
integer input NAME. A symbolic batch dim (dynamic_axes) needs --batch N.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImport(cmd.OutOrStdout(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "write the graph to `FILE` (.ir)")
	fl.StringVar(&f.weights, "weights", "", "write the weights to `FILE` (default: the -o file with .safetensors)")
	fl.IntVar(&f.opts.Batch, "batch", 0, "size of a symbolic batch dim (dim 0 of the inputs)")
	fl.StringVar(&f.opts.Loss, "loss", "", "add a training loss to an inference graph: cross-entropy")
	fl.StringVar(&f.opts.Labels, "labels", "", "name of the labels input --loss adds")
	fl.StringVar(&f.opts.Name, "name", "", "graph name (default: the file's base name)")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func runImport(stdout io.Writer, path string, f importFlags) error {
	if f.opts.Batch < 0 {
		return fmt.Errorf("--batch must be positive, got %d", f.opts.Batch)
	}
	if !strings.HasSuffix(f.out, ".ir") {
		return fmt.Errorf("-o %s: want a .ir file", f.out)
	}
	m, err := onnx.ImportFile(path, f.opts)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# imported from %s by autopar import; weights: %s\n", path, weightsPath(f))
	if err := ir.Print(&buf, m.Graph); err != nil {
		return err
	}
	// The text must parse back to the graph it prints; a failure is an importer bug, caught
	// here rather than by the user's next command.
	if _, err := frontend.Parse(f.out, buf.Bytes()); err != nil {
		return fmt.Errorf("the imported graph does not parse back (an importer bug): %w", err)
	}
	if err := writeFileAtomic(f.out, func(w io.Writer) error { _, err := w.Write(buf.Bytes()); return err }); err != nil {
		return err
	}
	if err := safetensors.WriteFile(weightsPath(f), m.Weights, map[string]string{"source": path}); err != nil {
		return err
	}
	var params int64
	for _, w := range m.Weights {
		params += int64(w.Len())
	}
	fmt.Fprintf(stdout, "imported %s: %d values, %d params (%d weights) -> %s, %s\n",
		path, len(m.Graph.Values), len(m.Weights), params, f.out, weightsPath(f))
	return nil
}

func weightsPath(f importFlags) string {
	if f.weights != "" {
		return f.weights
	}
	return strings.TrimSuffix(f.out, ".ir") + ".safetensors"
}
