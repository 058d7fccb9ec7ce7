package render

import (
	"fmt"
	"strings"

	"github.com/emicklei/dot"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
)

// Options steer Graph.
type Options struct {
	// Ops draws one node per value of the training step instead of one per layer per
	// stage. A GPT step has hundreds of values per layer, so it is off by default.
	Ops bool
	// MaxNodes, if positive, makes Graph with Ops refuse a plan with more values than
	// this, with an error saying so: Graphviz takes minutes over tens of thousands of
	// nodes, and the picture is unreadable long before. Zero means no limit.
	MaxNodes int
	// Notation writes the specs of the op view: Alpa's (the zero value), JAX's
	// PartitionSpecs or DTensor's placements.
	Notation mesh.Notation
}

// Edge colours: grey for an operand read as it is, blue for a resharding inside a stage,
// red for a transfer between stages.
const (
	colorPlain   = "#7f7f7f"
	colorReshard = "#1f77b4"
	colorCross   = "#d62728"
)

// Graph draws plan p as a Graphviz graph: one cluster per stage (subgraph cluster_stageN),
// and in it one node per layer (default) or per value (opts.Ops), filled with the stage's
// colour. Edges carry the resharding collectives between a producer's spec and the spec its
// consumer reads, and send/recv across stages. The same plan gives byte-identical DOT.
//
// p must come from autopar.Compile or autopar.ReadPlan (it needs the training step). A
// plan whose values do not fit the step (a spec of the wrong rank, an operand no stage
// holds, a split the mesh cannot divide) is an error, never a picture.
func Graph(p *autopar.Plan, opts Options) (*dot.Graph, error) {
	ix, err := newIndex(p)
	if err != nil {
		return nil, err
	}
	edges, err := ix.edges()
	if err != nil {
		return nil, err
	}
	g := dot.NewGraph(dot.Directed)
	g.Attrs("rankdir", "TB", "fontname", "Helvetica", "labelloc", "t", "newrank", "true")
	g.Label(planTitle(p))
	g.NodeInitializer(func(n dot.Node) { n.Attrs("fontname", "Helvetica", "fontsize", "10") })
	g.EdgeInitializer(func(e dot.Edge) { e.Attrs("fontname", "Helvetica", "fontsize", "9") })
	clusters := make([]*dot.Graph, len(p.Stages))
	for s := range p.Stages {
		c := g.Subgraph(fmt.Sprintf("stage%d", s), dot.ClusterOption{})
		c.Label(stageLabel(p, s))
		// emicklei/dot names a subgraph by its own counter (cluster_s1, ...), so the
		// stage's name goes in the id attribute, which Graphviz gives the SVG group.
		c.Attrs("id", fmt.Sprintf("cluster_stage%d", s), "style", "rounded", "color", "#555555", "fontname", "Helvetica")
		clusters[s] = c
	}
	if opts.Ops {
		err = drawOps(g, clusters, ix, edges, opts)
	} else {
		err = drawLayers(g, clusters, ix, edges)
	}
	if err != nil {
		return nil, err
	}
	return g, nil
}

// planTitle is the graph's caption: the model, the cluster and the predicted step.
func planTitle(p *autopar.Plan) string {
	return fmt.Sprintf("%s on %s (%d×%d devices), batch %d in %d micro-batches (%s): predicted step %s",
		p.Model, p.Cluster.Name, p.Cluster.Hosts, p.Cluster.DevicesPerHost, p.Batch, p.Microbatches,
		p.Schedule, formatSeconds(p.Predicted.StepTime))
}

// stageLabel is a stage cluster's caption: submesh, logical mesh, devices and time.
func stageLabel(p *autopar.Plan, s int) string {
	st := &p.Stages[s]
	return fmt.Sprintf("stage %d: layers %d-%d, submesh %dx%d, logical mesh (%d, %d), devices %s, %s per micro-batch, %s per device",
		s, st.FirstLayer, st.LastLayer, st.Submesh.Hosts, st.Submesh.Devices, st.Logical[0], st.Logical[1],
		deviceRange(st.Devices), formatSeconds(st.Time), formatBytes(st.MemoryBytes))
}

// drawOps adds one node per listed value and one edge per operand use.
func drawOps(g *dot.Graph, clusters []*dot.Graph, ix *index, edges []edge, opts Options) error {
	total := 0
	for _, st := range ix.p.Stages {
		total += len(st.Values)
	}
	if opts.MaxNodes > 0 && total > opts.MaxNodes {
		return fmt.Errorf("render: the op view of %s has %d nodes, more than the limit of %d, expected the layer view (no --ops) or a higher --max-nodes",
			ix.p.Model, total, opts.MaxNodes)
	}
	nodes := make([]map[ir.ValueID]dot.Node, len(clusters))
	for s, st := range ix.p.Stages {
		nodes[s] = make(map[ir.ValueID]dot.Node, len(st.Values))
		for _, v := range st.Values {
			id, _ := ix.step.Lookup(v.Name)
			nodes[s][id] = opNode(clusters[s], s, ix.step.Value(id), v, opts.Notation)
		}
	}
	memo := map[string]reshard{}
	for _, e := range edges {
		r, err := ix.reshardOf(e, memo)
		if err != nil {
			return err
		}
		de := g.Edge(nodes[e.FromStage][e.From], nodes[e.ToStage][e.To])
		styleEdge(de, e.Cross(), r, opts.Notation)
	}
	return nil
}

// opNode draws value v of stage s: its name, op and type, and its spec. Graph inputs and
// constants are ellipses, ops boxes; the tooltip holds the strategy and its costs.
func opNode(c *dot.Graph, s int, val *ir.Value, v autopar.ValuePlan, nt mesh.Notation) dot.Node {
	n := c.Node(fmt.Sprintf("s%d:%s", s, v.Name))
	n.Label(fmt.Sprintf("%s\n%s %s\n%s", v.Name, v.Op, val.Type, specText(v.Spec, nt)))
	shape := "box"
	if len(val.Args) == 0 {
		shape = "ellipse"
	}
	n.Attrs("shape", shape, "style", "filled", "fillcolor", StageColor(s))
	tip := fmt.Sprintf("%s: %s", v.Name, v.Strategy)
	if v.Compute > 0 || v.Comm > 0 {
		tip += fmt.Sprintf("; compute %s, communication %s", formatSeconds(v.Compute), formatSeconds(v.Comm))
	}
	n.Attr("tooltip", tip)
	return n
}

// styleEdge colours and labels an operand edge by what moving the value costs.
func styleEdge(de dot.Edge, cross bool, r reshard, nt mesh.Notation) {
	switch {
	case cross:
		de.Label(fmt.Sprintf("send/recv %s→%s %s", specText(r.From, nt), specText(r.To, nt), formatBytes(r.Bytes)))
		de.Attrs("color", colorCross, "fontcolor", colorCross, "style", "bold")
	case r.Needed(false):
		de.Label(reshardText(r, nt))
		de.Attrs("color", colorReshard, "fontcolor", colorReshard, "penwidth", "1.5")
	default:
		de.Attr("color", colorPlain)
	}
}

// reshardText is one line per collective, each with the layout it leaves and the bytes it
// works on (B of the alpha–beta model), then the total time when anything costs.
func reshardText(r reshard, nt mesh.Notation) string {
	var b strings.Builder
	before := r.From
	for i, st := range r.Steps {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s %s→%s", collectiveName(st.Kind), specText(before, nt), specText(st.After, nt))
		if st.Bytes > 0 && st.Kind != mesh.Slice {
			fmt.Fprintf(&b, " %s", formatBytes(int64(st.Bytes)))
		}
		before = st.After
	}
	if r.Time > 0 {
		fmt.Fprintf(&b, "\n%s", formatSeconds(r.Time))
	}
	return b.String()
}
