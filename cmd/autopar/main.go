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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
)

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit statuses: 1 for any error, and after a signal 128 + its number, as shells report a
// command killed by it (130 for Ctrl-C).
const (
	exitError       = 1
	exitInterrupted = 130
	exitTerminated  = 143
)

// exit ends the process on a second signal; afterNotify runs once the signals are caught,
// with the context the command will run under. Tests replace them.
var (
	exit        = os.Exit
	afterNotify = func(context.Context) {}
)

// cli runs the command line args and returns the exit status. The first SIGINT or SIGTERM
// cancels the context every command runs under: a search, a run, codegen or the writing of
// an output directory stops, writing nothing, and the status is 130 (143 for SIGTERM), even
// when the command had finished its work. A second signal exits at once with that status.
func cli(args []string, stdout, stderr io.Writer) int {
	if _, ok := stderr.(*os.File); !ok { // a file is safe for concurrent writes, and may be a terminal
		stderr = &lockedWriter{w: stderr}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	status := make(chan int, 1) // the status the first signal asks for
	go watchSignals(sigs, done, cancel, status, stderr)
	afterNotify(ctx)
	defer func() { global = globalFlags{} }() // command functions called directly get the defaults
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if ctx.Err() != nil {
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "autopar:", err)
		}
		fmt.Fprintln(stderr, "autopar: interrupted")
		return <-status
	}
	if err != nil {
		fmt.Fprintln(stderr, "autopar:", err)
		if strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") ||
			strings.HasPrefix(err.Error(), "unknown shorthand flag") {
			fmt.Fprintln(stderr, "Run 'autopar --help' for the commands, or 'autopar COMMAND --help' for a command's flags.")
		}
		return exitError
	}
	return 0
}

// watchSignals cancels on the first signal, after putting its exit status in status, and
// exits the process on the second. It returns when done closes.
func watchSignals(sigs <-chan os.Signal, done <-chan struct{}, cancel func(), status chan<- int, stderr io.Writer) {
	select {
	case sig := <-sigs:
		status <- signalStatus(sig)
		cancel()
		fmt.Fprintln(stderr, "autopar: interrupted, stopping (interrupt again to quit at once)")
	case <-done:
		return
	}
	select {
	case sig := <-sigs:
		fmt.Fprintln(stderr, "autopar: interrupted again, quitting")
		exit(signalStatus(sig))
	case <-done:
	}
}

func signalStatus(sig os.Signal) int {
	if sig == syscall.SIGTERM {
		return exitTerminated
	}
	return exitInterrupted
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "autopar",
		Short:         "an auto-parallelizing compiler for neural-network training",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	addGlobalFlags(root.PersistentFlags())
	root.AddCommand(newModelCmd(), newTrainCmd(), newShardCmd(), newCompileCmd(), newRunCmd(), newExecCmd(), newRenderCmd(), newExplainCmd(), newExportCmd(), newImportCmd(), newCalibrateCmd())
	return root
}

// version is the module version autopar was built from ("devel" from a checkout), with
// the VCS revision when the build recorded one.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := strings.TrimPrefix(bi.Main.Version, "v")
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return v + ", " + bi.GoVersion
}

// lockedWriter serializes writes: the signal watcher writes to stderr beside the command.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
