// Command autopar compiles a neural-network training step for many devices: it reads a
// model, chooses data, tensor and pipeline parallelism, and emits one program per device.
//
//	autopar model gpt --layers 24 --hidden 2048 > gpt.ir   write a zoo model as .ir
//	autopar train model.ir --steps 20                      train it serially
//	autopar shard model.ir --mesh 2x4 --cluster dgx-a100   shard its training step on one mesh
//	autopar compile model.ir --cluster p3.16xlarge:2 -o out the whole compiler: plan.json
//	autopar run model.ir --cluster cpu:4 --check             train on the runtime, checked
//	mpirun -np 4 autopar exec out/                          run saved programs, a process per device
//	autopar render out/plan.json -o plan.svg                draw a plan
//	autopar explain out/plan.json --op NAME                 why an op got its sharding
//
// The logic lives in the library packages; this command only parses flags and prints.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
)

func main() {
	// Ctrl-C cancels the context: a long search or run stops cleanly, writing nothing.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "autopar:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "autopar",
		Short:         "an auto-parallelizing compiler for neural-network training",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newModelCmd(), newTrainCmd(), newShardCmd(), newCompileCmd(), newRunCmd(), newExecCmd(), newRenderCmd(), newExplainCmd())
	return root
}
