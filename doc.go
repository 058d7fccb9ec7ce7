// Package autopar is the library facade of the autopar compiler: the calls a Go training
// program makes.
//
//	g, _ := frontend.ParseFile("gpt.ir")            // or a graph built with frontend.NewBuilder
//	c, _ := mesh.ParseCluster("cpu:4")
//	plan, err := autopar.Compile(ctx, g, c, autopar.Options{})
//	progs, err := plan.Programs()                   // one per device
//	plan.WriteJSON(w)                               // plan.json, byte-identical for the same input
//
// Compile runs the whole pipeline of DESIGN.md: the graph of one micro-batch
// (passes.Rebatch), its training step (passes.TrainingStep), Alpa's layer clustering
// (passes.ClusterLayers), and the stage–submesh dynamic program (dp.Solve) whose stage costs
// come from the intra-operator sharding ILP (passes/sharding) of each candidate stage on each
// candidate logical mesh. The result is a Plan: stages, submeshes, logical meshes, the
// sharding of every value, and what it predicts (step time split into compute,
// communication and pipeline bubble, memory per device, throughput).
//
// The package holds orchestration only; every decision is made by the package that owns
// it, and this one must not duplicate their logic.
package autopar
