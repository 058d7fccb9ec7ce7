package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/passes/sharding"
	"github.com/autopar/autopar/render"
	"github.com/autopar/autopar/units"
)

// newShardCmd runs the intra-operator pass alone on one logical mesh: useful to see why an
// op is split the way it is before pipeline stages enter the picture.
func newShardCmd() *cobra.Command {
	var o shardFlags
	cmd := &cobra.Command{
		Use:   "shard model.ir --mesh N0xN1 --cluster SPEC [--memory B] [--json]",
		Short: "choose the intra-operator sharding of a training step on one logical mesh",
		Long: "Reads a model, makes its SGD training step (unless it already has updates), and " +
			"solves the sharding ILP on the logical mesh N0xN1 of the cluster's first N0*N1 devices. " +
			"Prints each op's chosen spec, the collectives that follow, and the predicted costs.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShard(cmd.Context(), cmd.OutOrStdout(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.mesh, "mesh", "", "logical mesh shape `N0xN1`, e.g. 2x4")
	f.StringVar(&o.cluster, "cluster", "", "cluster preset[:hosts] or JSON spec `SPEC`")
	f.StringVar(&o.budget, "memory", "", "per-device memory budget `B` in bytes (suffixes K, M, G, T, Ki, Mi, Gi, Ti, optional B); default the device memory")
	f.StringVar(&o.budget, "memory-budget", "", "the old name of --memory")
	_ = f.MarkDeprecated("memory-budget", "use --memory, as compile and run do")
	f.BoolVar(&o.json, "json", false, "print the plan as JSON")
	f.DurationVar(&o.timeLimit, "time-limit", time.Minute, "lp_solve CPU-time limit per sharding ILP")
	f.BoolVar(&o.layersOnce, "layers-once", true, "solve identical layers once")
	f.StringVar(&o.notation, "notation", "alpa", notationUsage)
	_ = cmd.MarkFlagRequired("mesh")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

type shardFlags struct {
	mesh, cluster, budget string
	notation              string
	json, layersOnce      bool
	timeLimit             time.Duration
}

func runShard(ctx context.Context, w io.Writer, path string, o shardFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	nt, err := parseNotation(o.notation, o.json)
	if err != nil {
		return err
	}
	c, err := parseCluster(o.cluster)
	if err != nil {
		return err
	}
	n0, n1, err := mesh.ParseShape(o.mesh)
	if err != nil {
		return fmt.Errorf("--mesh: %w", err)
	}
	if c.Devices()%(n0*n1) != 0 || n0*n1 > c.Devices() {
		return fmt.Errorf("--mesh %s: %d devices do not divide the cluster's %d", o.mesh, n0*n1, c.Devices())
	}
	var budget int64
	if o.budget != "" {
		if budget, err = parseSize("--memory", o.budget); err != nil {
			return err
		}
	}
	if o.timeLimit <= 0 {
		return fmt.Errorf("--time-limit %v: expected a positive duration, e.g. 30s", o.timeLimit)
	}
	lm, err := meshOver(c, n0, n1)
	if err != nil {
		return err
	}
	g, err := parseModel(path)
	if err != nil {
		return err
	}
	if len(g.Updates) == 0 {
		if g, err = passes.TrainingStep(g, passes.Optimizer{Kind: "sgd", LR: 0.01}); err != nil {
			return err
		}
	}
	res, err := sharding.Solve(ctx, g, lm, sharding.Options{Cluster: c, MemoryBudget: budget,
		TimeLimit: o.timeLimit, SolveLayersOnce: o.layersOnce})
	if err != nil {
		return err
	}
	if o.json {
		return writeShardJSON(w, g, res)
	}
	return writeShardText(w, g, res, nt)
}

// meshOver lays an (n0, n1) logical mesh over the cluster's first n0*n1 devices: whole
// hosts when it spans several, else the first devices of host 0.
func meshOver(c *mesh.Cluster, n0, n1 int) (*mesh.LogicalMesh, error) {
	n := n0 * n1
	sub := mesh.Submesh{Hosts: 1, Devices: n}
	if n > c.DevicesPerHost {
		if n%c.DevicesPerHost != 0 {
			return nil, fmt.Errorf("--mesh %dx%d: %d devices are not whole hosts of %d", n0, n1, n, c.DevicesPerHost)
		}
		sub = mesh.Submesh{Hosts: n / c.DevicesPerHost, Devices: c.DevicesPerHost}
	}
	return mesh.NewLogicalMesh(c, sub, n0, n1)
}

func writeShardText(w io.Writer, g *ir.Graph, r *sharding.Result, nt mesh.Notation) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "mesh %s\n\nvalue\top\tspec\tstrategy\n", r.Mesh)
	for id := range g.Values {
		v := &g.Values[id]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.Op, specIn(nt, r.Specs[id]), r.Strategies[id].Name)
	}
	tw.Flush()
	fmt.Fprintln(w, render.SpecKey(nt))
	fmt.Fprintf(w, "\ncollectives (%d)\n", len(r.Collectives))
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, c := range r.Collectives {
		where := "in op"
		if c.Consumer != ir.NoValue {
			where = "to " + g.Value(c.Consumer).Name
		}
		fmt.Fprintf(tw, "%s\t%s\taxes %s\t%s\t%s\t%s\n", g.Value(c.Value).Name, c.Kind, c.Axes.Digits(), where,
			units.BytesF(c.Bytes), units.Seconds(c.Time))
	}
	tw.Flush()
	fmt.Fprintf(w, "\npredicted step: %s = compute %s + communication %s + resharding %s\n",
		units.Seconds(r.Cost.Total), units.Seconds(r.Cost.Compute), units.Seconds(r.Cost.Communication), units.Seconds(r.Cost.Resharding))
	budget := "none"
	if r.Budget > 0 {
		budget = units.Bytes(r.Budget)
	}
	fmt.Fprintf(w, "peak memory per device: %s (budget %s)\n", units.Bytes(r.PeakMemory), budget)
	fmt.Fprintf(w, "ilp: %d values in %d nodes (%d tied), %d variables (%d edge), %d rows (%d memory), %s in %d round(s)\n",
		r.ILP.Values, r.ILP.Nodes, r.ILP.TiedGroups, r.ILP.Variables, r.ILP.EdgeVars, r.ILP.Rows, r.ILP.MemoryRows, r.ILP.Status, r.ILP.Rounds)
	return nil
}

func specText(s mesh.Spec) string {
	if t := s.String(); t != "" {
		return t
	}
	return "-"
}

// notationUsage documents --notation, which shard, explain and render share.
const notationUsage = "write specs as `alpa` (S0R), jax (P('x', None)) or dtensor ([Shard(0), Replicate()])"

// parseNotation reads --notation. JSON output keeps Alpa's notation, which plan.json
// uses, so another notation with --json is an error rather than a flag ignored.
func parseNotation(name string, json bool) (mesh.Notation, error) {
	nt, err := mesh.ParseNotation(name)
	if err != nil {
		return 0, fmt.Errorf("--notation: %w", err)
	}
	if json && nt != mesh.Alpa {
		return 0, fmt.Errorf("--notation %s: --json writes specs in Alpa's notation, as plan.json does; expected --notation alpa with --json", nt)
	}
	return nt, nil
}

// specIn writes a spec in notation nt: in Alpa's, a scalar's empty spec is "-".
func specIn(nt mesh.Notation, s mesh.Spec) string {
	if nt == mesh.Alpa {
		return specText(s)
	}
	return nt.Format(s)
}

type jsonOp struct {
	Name     string    `json:"name"`
	Op       string    `json:"op"`
	Spec     mesh.Spec `json:"spec"`
	Strategy string    `json:"strategy"`
}

type jsonCollective struct {
	Value    string `json:"value"`
	Consumer string `json:"consumer,omitempty"`
	sharding.Collective
}

// writeShardJSON prints the plan without the solve time, so equal inputs give equal bytes.
func writeShardJSON(w io.Writer, g *ir.Graph, r *sharding.Result) error {
	out := struct {
		Mesh        string            `json:"mesh"`
		Ops         []jsonOp          `json:"ops"`
		Collectives []jsonCollective  `json:"collectives"`
		Cost        sharding.Cost     `json:"cost"`
		PeakMemory  int64             `json:"peak_memory"`
		Budget      int64             `json:"memory_budget"`
		ILP         sharding.ILPStats `json:"ilp"`
	}{Mesh: r.Mesh.String(), Cost: r.Cost, PeakMemory: r.PeakMemory, Budget: r.Budget, ILP: r.ILP}
	out.ILP.SolveTime = 0
	for id := range g.Values {
		out.Ops = append(out.Ops, jsonOp{g.Values[id].Name, g.Values[id].Op.String(), r.Specs[id], r.Strategies[id].Name})
	}
	out.Collectives = []jsonCollective{}
	for _, c := range r.Collectives {
		jc := jsonCollective{Value: g.Value(c.Value).Name, Collective: c}
		if c.Consumer != ir.NoValue {
			jc.Consumer = g.Value(c.Consumer).Name
		}
		out.Collectives = append(out.Collectives, jc)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
