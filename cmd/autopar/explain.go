package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/internal/gcpolicy"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/render"
	"github.com/autopar/autopar/units"
)

type explainFlags struct {
	op       string
	stage    int
	memory   bool
	json     bool
	notation string
}

// newExplainCmd is `autopar explain`: the questions users ask of a plan (why this sharding,
// what else the stage could have run on, where the memory goes), answered by the library's
// Plan.ExplainOp, Plan.ExplainStage and Plan.MemoryBreakdown.
func newExplainCmd() *cobra.Command {
	var f explainFlags
	cmd := &cobra.Command{
		Use:   "explain PLAN.json (--op NAME | --stage N | --memory) [--json]",
		Short: "say why a plan chose an op's sharding, a stage's mesh, and where each device's memory goes",
		Long: `Reads a plan.json written by autopar compile and answers one question about it.

--op NAME lists the value's candidate strategies on its stage's logical mesh, each with its
compute, its own collectives and the resharding from its operands' chosen layouts and into
its consumers', marks the chosen one (*) and the locally cheapest (<), and says why the
chosen one won; when another is locally cheaper, the stage is solved again with that one
forced to find out whether memory or the neighbours decided.
--stage N prices the stage's layers on every submesh and logical mesh of the cluster, as
the stage DP did, with the step time the plan would have with each.
--memory splits each device's predicted peak into weights, gradients, optimizer state and
activations.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			stageSet := cmd.Flags().Changed("stage")
			defer gcpolicy.ForSearch()()
			return runExplain(cmd.Context(), cmd.OutOrStdout(), args[0], f, stageSet)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.op, "op", "", "explain the sharding of the value `NAME`")
	fl.IntVar(&f.stage, "stage", 0, "explain the mesh of stage `N` (0-based)")
	fl.BoolVar(&f.memory, "memory", false, "break down each device's predicted memory")
	fl.BoolVar(&f.json, "json", false, "print JSON instead of tables")
	fl.StringVar(&f.notation, "notation", "alpa", notationUsage+" in --op's table")
	return cmd
}

func runExplain(ctx context.Context, w io.Writer, path string, f explainFlags, stageSet bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	asked := 0
	for _, b := range []bool{f.op != "", stageSet, f.memory} {
		if b {
			asked++
		}
	}
	if asked != 1 {
		return errors.New("explain: give exactly one of --op NAME, --stage N or --memory")
	}
	nt, err := parseNotation(f.notation, f.json)
	if err != nil {
		return err
	}
	p, err := readPlanFile(path)
	if err != nil {
		return err
	}
	var out any
	var text func(io.Writer, *autopar.Plan)
	switch {
	case f.op != "":
		e, err := p.ExplainOp(ctx, f.op)
		if err != nil {
			return err
		}
		out, text = e, func(w io.Writer, _ *autopar.Plan) { printOpExplanation(w, e, nt) }
	case stageSet:
		e, err := p.ExplainStage(ctx, f.stage)
		if err != nil {
			return err
		}
		out, text = e, func(w io.Writer, p *autopar.Plan) { printStageExplanation(w, p, e) }
	default:
		rows := p.MemoryBreakdown()
		out, text = rows, func(w io.Writer, _ *autopar.Plan) { printMemory(w, rows) }
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	text(w, p)
	return nil
}

func printOpExplanation(w io.Writer, e *autopar.OpExplanation, nt mesh.Notation) {
	fmt.Fprintf(w, "%s = %s : %s, stage %d, layer %d, on mesh %s\n\n", e.Name, e.Op, e.Type, e.Stage, e.Layer, e.Mesh)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\t#\tstrategy\tin\tout\tcompute\tcomm\treshard in\treshard out\ttotal\tmemory\tcollectives")
	for _, c := range e.Candidates {
		mark := ""
		if c.Chosen {
			mark = "*"
		}
		if c.Index == e.Cheapest && !c.Chosen {
			mark = "<"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, c.Index, c.Name, specList(nt, c.In), specIn(nt, c.Out),
			units.Seconds(c.Compute), units.Seconds(c.Comm), units.Seconds(c.ReshardIn), units.Seconds(c.ReshardOut), units.Seconds(c.Total),
			units.Bytes(c.Memory), orDash(strings.Join(c.Collectives, "; ")))
	}
	tw.Flush()
	fmt.Fprintln(w, render.SpecKey(nt))
	fmt.Fprintf(w, "\n* chosen, < locally cheapest; times per micro-batch, the stage costs %s\n", units.Seconds(e.StageCost))
	fmt.Fprintf(w, "why (%s): %s\n", e.Why, e.Reason)
	for _, n := range e.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// specList writes operand specs: comma-separated in Alpa's notation, and separated by
// semicolons in the others, whose specs hold commas.
func specList(nt mesh.Notation, specs []mesh.Spec) string {
	if len(specs) == 0 {
		return "-"
	}
	parts := make([]string, len(specs))
	for i, s := range specs {
		parts[i] = specIn(nt, s)
	}
	sep := ","
	if nt != mesh.Alpa {
		sep = "; "
	}
	return strings.Join(parts, sep)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printStageExplanation(w io.Writer, p *autopar.Plan, e *autopar.StageExplanation) {
	fmt.Fprintf(w, "stage %d of %d: layers %d-%d, %d ops, %d micro-batch(es) in flight under %s, %s per device\n\n",
		e.Stage, len(p.Stages), e.FirstLayer, e.LastLayer, e.Ops, e.InFlight, e.Schedule, units.Bytes(e.Capacity))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tsubmesh\tlogical mesh\tdevices\ttime/µbatch\tonce/step\tcompute\tcomm\treshard\tweights\tactivations\tmemory\tfits\tstep time")
	for _, a := range e.Alternatives {
		mark := ""
		if a.Chosen {
			mark = "*"
		}
		if !a.OK {
			fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%d\tno sharding: %s\n", mark, a.Submesh, a.Logical[0], a.Logical[1], a.Devices, a.Err)
			continue
		}
		if a.Pruned {
			fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%d\t≥ %s\tnot solved: its weights alone, ≥ %s per device, overflow the memory\n", mark, a.Submesh,
				a.Logical[0], a.Logical[1], a.Devices, units.Seconds(a.Time), units.Bytes(a.WeightBytes))
			continue
		}
		step := "-"
		if a.StepTime > 0 {
			step = units.Seconds(a.StepTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%dx%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mark, a.Submesh, a.Logical[0], a.Logical[1],
			a.Devices, units.Seconds(a.Time), units.Seconds(a.Step), units.Seconds(a.Cost.Compute), units.Seconds(a.Cost.Communication), units.Seconds(a.Cost.Resharding),
			units.Bytes(a.WeightBytes), units.Bytes(a.ActBytes), units.Bytes(a.MemoryBytes),
			yesNo(a.Fits), step)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n* the plan's choice, step time %s; compute, comm and reshard: the ILP's, time/µbatch + once/step;\n"+
		"memory = weights + %d × activations; step time: the plan's\n"+
		"with this stage on that mesh, shown for meshes of as many devices (the others would not tile the cluster)\n",
		units.Seconds(e.StepTime), e.InFlight)
	if s := p.Stages[e.Stage]; s.Recompute {
		what := "its inputs"
		if s.RecomputeLayers {
			what = "its inputs and its layers' inputs (it recomputes one layer at a time)"
		}
		fmt.Fprintf(w, "the stage recomputes its activations in the backward (--remat): activations are %s per\n"+
			"micro-batch, and memory adds what the micro-batch whose backward runs recomputes (%s on the plan's mesh)\n",
			what, units.Bytes(s.RecomputeBytes))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printMemory(w io.Writer, rows []autopar.DeviceMemory) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "device\tstage\tweights\tgradients\toptimizer\tactivations\ttotal\tcapacity\tused")
	for _, r := range rows {
		used := 0.0
		if r.Capacity > 0 {
			used = 100 * float64(r.Total) / float64(r.Capacity)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f%%\n", r.Device, r.Stage, units.Bytes(r.Weights),
			units.Bytes(r.Gradients), units.Bytes(r.Optimizer), units.Bytes(r.Activations),
			units.Bytes(r.Total), units.Bytes(r.Capacity), used)
	}
	tw.Flush()
}
