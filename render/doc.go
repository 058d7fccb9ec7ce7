// Package render draws a compiled plan so that a person can check it: the sharded training
// step as a Graphviz graph, and the pipeline schedule as an SVG Gantt chart.
//
// Graph turns a plan.Plan into a *dot.Graph (github.com/emicklei/dot): one cluster per
// pipeline stage labelled with its submesh, logical mesh, devices and time; ops coloured by
// stage; every value showing its sharding spec; the resharding collectives a consumer
// needs written on the edge that needs them, priced with mesh.ReshardCost; send/recv on
// edges that cross stages. A training step has hundreds of values, so the default view
// collapses each stage's layers into one node each (Options.Ops shows every op). WriteImage
// runs Graphviz's dot program for SVG and PNG; DOT text never needs it.
//
// Predict simulates the plan's pipeline schedule from its predicted stage times, and
// ReadTrace reads what the runtime measured (runtime.Result.WriteTrace's Chrome trace);
// both give a Schedule, which Timeline writes as SVG: one row per device against time,
// forward and backward blocks shaded per micro-batch, communication and the update.
//
// render only reads plans: it must not decide anything a plan holds, and it never draws a
// plan it could not check (a value's operand missing, a spec that does not fit its tensor,
// a trace of another plan are errors, not pictures). Output is deterministic: the same
// plan gives byte-identical DOT and SVG.
package render
