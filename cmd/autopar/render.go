package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/render"
)

type renderFlags struct {
	out      string
	ops      bool
	maxNodes int
	force    bool
	stage    int
	layer    int
	timeline bool
	trace    string
	model    string
	notation string
}

// newRenderCmd is `autopar render`: a plan as a Graphviz graph or as a pipeline timeline.
func newRenderCmd() *cobra.Command {
	var f renderFlags
	cmd := &cobra.Command{
		Use:   "render PLAN.json -o FILE.dot|.svg|.png [--ops] | --timeline -o FILE.svg|.png [--trace TRACE.json]",
		Short: "draw a plan: the sharded graph (Graphviz) or the pipeline timeline (SVG or PNG)",
		Long: `Draws a compiled plan (autopar compile -o DIR writes DIR/plan.json).

By default it draws the sharded training step with Graphviz: one cluster per pipeline
stage (submesh, logical mesh, devices, time), one node per layer of each stage, named by
the model blocks it holds (--ops: per op, with its sharding spec and the shape each device
holds), resharding collectives and send/recv on the edges. --ops draws at most
--max-nodes values (Graphviz takes minutes over more): --stage N and --layer N draw one
stage's or one layer's, --force draws all. The
format comes from the extension of -o: .dot needs nothing, .svg and .png run Graphviz's
dot program.

With --timeline it draws the pipeline schedule as a Gantt chart, one row per device:
simulated from the plan's predicted stage times, or with --trace measured by the runtime
(autopar run --trace TRACE.json, with the flags that compiled the plan). Its title gives
the step it draws beside the step the plan predicted. .svg needs nothing; .png runs
librsvg's rsvg-convert.

--model checks that the plan was compiled from that model. The output file is written
whole or not at all.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRender(cmd.Context(), cmd.OutOrStdout(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.out, "output", "o", "", "write the picture to `FILE` (.dot, .svg or .png; .svg or .png for --timeline)")
	fl.BoolVar(&f.ops, "ops", false, "draw every op instead of one node per layer per stage")
	fl.IntVar(&f.maxNodes, "max-nodes", 300, "with --ops, refuse to draw more values than this (0: no limit); Graphviz takes minutes over more")
	fl.BoolVar(&f.force, "force", false, "with --ops, draw however many values there are")
	fl.IntVar(&f.stage, "stage", -1, "with --ops, draw only stage `N`'s values")
	fl.IntVar(&f.layer, "layer", -1, "with --ops, draw only layer `N`'s values (the plan's layers: stage captions list them)")
	fl.BoolVar(&f.timeline, "timeline", false, "draw the pipeline timeline instead of the graph")
	fl.StringVar(&f.trace, "trace", "", "with --timeline, draw the runtime trace in `FILE` instead of the prediction")
	fl.StringVar(&f.model, "model", "", "check that the plan belongs to the model in `FILE.ir`")
	fl.StringVar(&f.notation, "notation", "alpa", notationUsage+" in --ops's labels")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func runRender(ctx context.Context, stdout io.Writer, path string, f renderFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.maxNodes < 0 {
		return fmt.Errorf("--max-nodes %d: expected a count ≥ 0 (0: no limit)", f.maxNodes)
	}
	if f.trace != "" && !f.timeline {
		return fmt.Errorf("--trace draws a timeline, expected --timeline with it")
	}
	if f.timeline && f.ops {
		return fmt.Errorf("--ops draws the graph, expected it without --timeline")
	}
	if !f.ops && (f.stage >= 0 || f.layer >= 0 || f.force) {
		return fmt.Errorf("--stage, --layer and --force narrow or force the op view, expected --ops with them")
	}
	if f.stage < -1 || f.layer < -1 {
		return fmt.Errorf("--stage %d --layer %d: expected a stage and a layer number from 0", f.stage, f.layer)
	}
	nt, err := parseNotation(f.notation, false)
	if err != nil {
		return err
	}
	if nt != mesh.Alpa && !f.ops {
		return fmt.Errorf("--notation %s writes the specs of the op view, expected --ops with it", nt)
	}
	format, err := render.FormatOf(f.out)
	if err != nil {
		return err
	}
	if f.timeline && format == render.DOT {
		return fmt.Errorf("-o %s: the timeline is a picture, not a graph: expected a .svg or .png file", f.out)
	}
	p, err := readPlanFile(path)
	if err != nil {
		return err
	}
	if f.model != "" {
		g, err := parseModel(f.model)
		if err != nil {
			return err
		}
		if err := p.CheckModel(g); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	var write func(io.Writer) error
	if f.timeline {
		write, err = timelineWriter(ctx, p, f.trace, format)
	} else {
		write, err = graphWriter(ctx, p, f, format, nt)
	}
	if err != nil {
		return err
	}
	if err := writeFileAtomic(f.out, write); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", f.out)
	return nil
}

// graphWriter builds the graph and lays it out before the output file is created, so a
// missing dot program or a plan that cannot be drawn leaves no file behind.
func graphWriter(ctx context.Context, p *autopar.Plan, f renderFlags, format render.Format, nt mesh.Notation) (func(io.Writer) error, error) {
	opts := render.Options{Ops: f.ops, MaxNodes: f.maxNodes, Notation: nt}
	if f.force {
		opts.MaxNodes = 0
	}
	if f.stage >= 0 {
		opts.Stage = &f.stage
	}
	if f.layer >= 0 {
		opts.Layer = &f.layer
	}
	g, err := render.Graph(&p.Plan, opts)
	if err != nil {
		return nil, err
	}
	var img bytes.Buffer
	if err := render.WriteImage(ctx, &img, g, format); err != nil {
		return nil, err
	}
	return func(w io.Writer) error { _, err := w.Write(img.Bytes()); return err }, nil
}

// timelineWriter draws the timeline, and converts it to PNG, before the output file is
// created, as graphWriter does.
func timelineWriter(ctx context.Context, p *autopar.Plan, trace string, format render.Format) (func(io.Writer) error, error) {
	var s *render.Schedule
	var err error
	if trace == "" {
		s, err = render.Predict(&p.Plan)
	} else {
		var r *os.File
		r, err = os.Open(trace)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		s, err = render.ReadTrace(r, &p.Plan)
		if err != nil {
			err = fmt.Errorf("%s: %w", trace, err)
		}
	}
	if err != nil {
		return nil, err
	}
	var svg, img bytes.Buffer
	if err := render.Timeline(&svg, s); err != nil {
		return nil, err
	}
	if err := render.WriteSVG(ctx, &img, svg.Bytes(), format); err != nil {
		return nil, err
	}
	return func(w io.Writer) error { _, err := w.Write(img.Bytes()); return err }, nil
}
