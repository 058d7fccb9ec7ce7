package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/emicklei/dot"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/plan"
	"github.com/autopar/autopar/units"
)

// Options steer Graph.
type Options struct {
	// Ops draws one node per value of the training step instead of one per layer per
	// stage. A GPT step has hundreds of values per layer, so it is off by default.
	Ops bool
	// MaxNodes, if positive, makes Graph with Ops refuse to draw more values than this
	// (after Stage and Layer), with an error naming the count and the filters: Graphviz
	// takes minutes over a few hundred nodes (gpt-tiny's 536: 6.5 min for SVG), and the
	// picture is unreadable long before. Zero means no limit.
	MaxNodes int
	// Stage and Layer, when set, restrict the op view to one pipeline stage and to one
	// layer of the clustering; an operand from outside is drawn as a grey name.
	Stage, Layer *int
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
// p must come from autopar.Compile or plan.ReadPlan (it needs the training step). A
// plan whose values do not fit the step (a spec of the wrong rank, an operand no stage
// holds, a split the mesh cannot divide) is an error, never a picture.
func Graph(p *plan.Plan, opts Options) (*dot.Graph, error) {
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
	g.Label(planTitle(p) + "\n" + SpecKey(opts.Notation))
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
func planTitle(p *plan.Plan) string {
	return fmt.Sprintf("%s on %s (%d×%d devices), batch %d in %d micro-batches (%s): predicted step %s\n"+
		"edges: forward values and gradients crossing, per micro-batch (dashed: no forward value), the update's per step; red: send/recv between stages",
		p.Model, p.Cluster.Name, p.Cluster.Hosts, p.Cluster.DevicesPerHost, p.Batch, p.Microbatches,
		p.Schedule, units.Seconds(p.Predicted.StepTime))
}

// stageLabel is a stage cluster's caption: submesh, logical mesh, devices and time.
func stageLabel(p *plan.Plan, s int) string {
	st := &p.Stages[s]
	remat := ""
	switch {
	case st.RecomputeLayers:
		remat = ", recomputing activations layer by layer"
	case st.Recompute:
		remat = ", recomputing activations"
	}
	return fmt.Sprintf("stage %d: layers %d-%d, submesh %dx%d, logical mesh %dx%d, devices %s, %s per micro-batch, %s per device%s",
		s, st.FirstLayer, st.LastLayer, st.Submesh.Hosts, st.Submesh.Devices, st.Logical[0], st.Logical[1],
		deviceRange(st.Devices), units.Seconds(st.Time), units.Bytes(st.MemoryBytes), remat)
}

// drawOps adds one node per listed value that opts' filters keep and one edge per operand
// use that reaches one of them.
func drawOps(g *dot.Graph, clusters []*dot.Graph, ix *index, edges []edge, opts Options) error {
	if err := checkFilters(ix.p, opts); err != nil {
		return err
	}
	keep := func(s int, id ir.ValueID) bool {
		return (opts.Stage == nil || *opts.Stage == s) &&
			(opts.Layer == nil || *opts.Layer == ix.layerOf(s, ix.value(s, id).Layer).Layer)
	}
	total := 0
	for s, st := range ix.p.Stages {
		for _, v := range st.Values {
			if id, _ := ix.step.Lookup(v.Name); keep(s, id) {
				total++
			}
		}
	}
	if opts.MaxNodes > 0 && total > opts.MaxNodes {
		return fmt.Errorf("render: the op view of %s (%s) has %d nodes, more than the limit of %d: Graphviz takes minutes over a graph this size; "+
			"expected --stage N and --layer N to draw less, the layer view (no --ops), or --force", ix.p.Model, filterText(opts), total, opts.MaxNodes)
	}
	nodes := make([]map[ir.ValueID]dot.Node, len(clusters))
	for s, st := range ix.p.Stages {
		nodes[s] = make(map[ir.ValueID]dot.Node, len(st.Values))
		for _, v := range st.Values {
			if id, _ := ix.step.Lookup(v.Name); keep(s, id) {
				nodes[s][id] = opNode(clusters[s], s, ix.step.Value(id), v, ix.meshes[s], opts.Notation)
			}
		}
	}
	// outside draws an operand end the filters leave out as its name in grey.
	outside := func(s int, id ir.ValueID) dot.Node {
		n := g.Node(fmt.Sprintf("outside:s%d:%s", s, ix.step.Value(id).Name))
		n.Label(fmt.Sprintf("%s\n(stage %d)", ix.step.Value(id).Name, s))
		n.Attrs("shape", "plaintext", "fontcolor", colorPlain)
		return n
	}
	memo := map[string]reshard{}
	for _, e := range edges {
		from, okFrom := nodes[e.FromStage][e.From]
		to, okTo := nodes[e.ToStage][e.To]
		if !okFrom && !okTo {
			continue
		}
		if !okFrom {
			from = outside(e.FromStage, e.From)
		}
		if !okTo {
			to = outside(e.ToStage, e.To)
		}
		r, err := ix.reshardOf(e, memo)
		if err != nil {
			return err
		}
		styleEdge(g.Edge(from, to), e.Cross(), r, opts.Notation)
	}
	return nil
}

// checkFilters rejects a stage or layer the plan does not have.
func checkFilters(p *plan.Plan, opts Options) error {
	if s := opts.Stage; s != nil && (*s < 0 || *s >= len(p.Stages)) {
		return fmt.Errorf("render: --stage %d: the plan has %d stages, expected 0 to %d", *s, len(p.Stages), len(p.Stages)-1)
	}
	l := opts.Layer
	if l == nil {
		return nil
	}
	if *l < 0 || *l >= len(p.Layers) {
		return fmt.Errorf("render: --layer %d: the plan has %d layers, expected 0 to %d", *l, len(p.Layers), len(p.Layers)-1)
	}
	if s := opts.Stage; s != nil {
		if st := &p.Stages[*s]; *l < st.FirstLayer || *l > st.LastLayer {
			return fmt.Errorf("render: --layer %d is not in stage %d, which holds layers %d-%d", *l, *s, st.FirstLayer, st.LastLayer)
		}
	}
	return nil
}

// filterText says which part of the op view the filters keep: "stage 1, layer 3".
func filterText(opts Options) string {
	stage, layer := "every stage", "every layer"
	if opts.Stage != nil {
		stage = fmt.Sprintf("stage %d", *opts.Stage)
	}
	if opts.Layer != nil {
		layer = fmt.Sprintf("layer %d", *opts.Layer)
	}
	return stage + ", " + layer
}

// localShape is " → [4,32] per device" for a value split across devices, "" for one every
// device holds whole.
func localShape(lm *mesh.LogicalMesh, t ir.Type, spec mesh.Spec) string {
	local, err := lm.LocalShape(t.Shape, spec)
	if err != nil || slices.Equal(local, t.Shape) {
		return "" // newIndex checked the spec fits; a scalar has nothing to split
	}
	return " → " + ir.Shape(local).String() + " per device"
}

// opNode draws value v of stage s: its name, op and global type, and its spec with the
// shape each device holds. Graph inputs and
// constants are ellipses, ops boxes; the tooltip holds the strategy and its costs.
func opNode(c *dot.Graph, s int, val *ir.Value, v plan.ValuePlan, lm *mesh.LogicalMesh, nt mesh.Notation) dot.Node {
	n := c.Node(fmt.Sprintf("s%d:%s", s, v.Name))
	n.Label(fmt.Sprintf("%s\n%s %s\n%s%s", v.Name, v.Op, val.Type, specText(v.Spec, nt), localShape(lm, val.Type, v.Spec)))
	shape := "box"
	if len(val.Args) == 0 {
		shape = "ellipse"
	}
	n.Attrs("shape", shape, "style", "filled", "fillcolor", StageColor(s))
	tip := fmt.Sprintf("%s: %s", v.Name, v.Strategy)
	if v.Compute > 0 || v.Comm > 0 {
		tip += fmt.Sprintf("; compute %s, communication %s", units.Seconds(v.Compute), units.Seconds(v.Comm))
	}
	n.Attr("tooltip", tip)
	return n
}

// styleEdge colours and labels an operand edge by what moving the value costs.
func styleEdge(de dot.Edge, cross bool, r reshard, nt mesh.Notation) {
	switch {
	case cross:
		de.Label(fmt.Sprintf("send/recv %s→%s %s", specText(r.From, nt), specText(r.To, nt), units.Bytes(r.Bytes)))
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
			fmt.Fprintf(&b, " %s", units.Bytes(int64(st.Bytes)))
		}
		before = st.After
	}
	if r.Time > 0 {
		fmt.Fprintf(&b, "\n%s", units.Seconds(r.Time))
	}
	return b.String()
}
