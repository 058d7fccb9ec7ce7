package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
)

// newModelCmd writes a zoo model as .ir. Its flags depend on the model, so cobra's flag
// parsing is off and each model's parameters become a flag set of their own.
func newModelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "model NAME|PRESET [--PARAM VALUE ...] [-o FILE]",
		Short: "write a zoo model (" + strings.Join(zoo.Names(), ", ") + ") or a preset as .ir",
		Long: "Writes a model of the zoo as .ir text. NAME is one of " + strings.Join(zoo.Names(), ", ") +
			"; PRESET is one of " + strings.Join(zoo.PresetNames(), ", ") +
			".\nRun `autopar model NAME --help` for the model's parameters.",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
				return cmd.Help()
			}
			return runModel(cmd.OutOrStdout(), args[0], args[1:])
		},
	}
}

func runModel(stdout io.Writer, name string, args []string) error {
	m, err := zoo.New(name)
	if err != nil {
		p, perr := zoo.NewPreset(name)
		if perr != nil {
			return fmt.Errorf("%v; presets: %s", err, strings.Join(zoo.PresetNames(), ", "))
		}
		m = p
	}
	fs := pflag.NewFlagSet("model "+name, pflag.ContinueOnError)
	out := fs.StringP("output", "o", "", "write the .ir to `FILE` instead of stdout")
	for _, p := range m.Params() {
		switch {
		case p.Int != nil:
			fs.IntVar(p.Int, p.Name, *p.Int, p.Usage)
		case p.Float != nil:
			fs.Float64Var(p.Float, p.Name, *p.Float, p.Usage)
		case p.String != nil:
			fs.StringVar(p.String, p.Name, *p.String, p.Usage)
		case p.Bool != nil:
			fs.BoolVar(p.Bool, p.Name, *p.Bool, p.Usage)
		}
	}
	// Help goes to stdout in cobra's layout, as every other command's does; errors go to
	// the caller, which prints them once on stderr.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			fmt.Fprintf(stdout, "Writes the %s model as .ir text.\n\nUsage:\n  autopar model %s [flags]\n\nFlags:\n%s", name, name, fs.FlagUsages())
			return nil
		}
		return fmt.Errorf("model %s: %w (autopar model %s --help lists its flags)", name, err, name)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("model %s: unexpected argument %q", name, fs.Arg(0))
	}
	g, err := m.Build()
	if err != nil {
		return err
	}
	return writeGraph(stdout, *out, g)
}

// writeGraph prints g to path, or to stdout when path is empty. A file is written whole or
// not at all: to a temporary name first, then renamed.
func writeGraph(stdout io.Writer, path string, g *ir.Graph) error {
	if path == "" {
		w := bufio.NewWriter(stdout)
		if err := ir.Print(w, g); err != nil {
			return err
		}
		return w.Flush()
	}
	return writeFileAtomic(path, func(w io.Writer) error { return ir.Print(w, g) })
}

// writeFileAtomic writes path whole or not at all: into a temporary file beside it, then
// renamed over it. Errors name path, never the temporary file.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(dirOf(path), ".autopar-*")
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: errors.Unwrap(err)}
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	err = write(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644) // CreateTemp makes it 0600
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	var pe *os.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return &os.PathError{Op: "write", Path: path, Err: pe.Err}
	case errors.As(err, &le):
		if st, serr := os.Stat(path); serr == nil && st.IsDir() {
			return &os.PathError{Op: "write", Path: path, Err: errors.New("is a directory, expected a file name")}
		}
		return &os.PathError{Op: "write", Path: path, Err: le.Err}
	}
	return err
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}
