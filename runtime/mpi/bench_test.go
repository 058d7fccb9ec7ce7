package mpi_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend/zoo"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
	"github.com/autopar/autopar/runtime/mpi"
)

// The benchmarks compare the in-process runtime with the MPI one on 2 ranks. The in-process
// half runs under plain go test; the MPI half only under mpirun, with a fixed iteration
// count so that every rank runs the same collectives (see BENCHMARKS.md):
//
//	go test -tags mpi -run '^$' -bench . ./runtime/mpi                     in-process
//	go test -c -tags mpi -o /tmp/mpi.test ./runtime/mpi
//	mpirun -np 2 /tmp/mpi.test -test.run '^$' -test.bench . -test.benchtime 200x   MPI
//
// Under mpirun only rank 0 prints.

func underMPIRun() bool { return os.Getenv("OMPI_COMM_WORLD_SIZE") != "" }

// benchWorld initializes MPI for a benchmark under mpirun, or skips it elsewhere.
func benchWorld(b *testing.B) *mpi.World {
	b.Helper()
	if !underMPIRun() {
		b.Skip("MPI half: run the test binary under mpirun -np 2 (see bench_test.go)")
	}
	w, err := mpi.Init()
	if err != nil {
		b.Skip(err)
	}
	return w
}

func benchTensor(elems int, seed uint64) *kernels.Tensor {
	x := kernels.New(ir.Type{DType: ir.F32, Shape: ir.Shape{elems}})
	for i := range x.F32 {
		seed = seed*6364136223846793005 + 1442695040888963407
		x.F32[i] = float32(seed>>40) / float32(1<<24)
	}
	return x
}

var benchSizes = []int{1 << 10, 1 << 20}

// BenchmarkAllReduceInProc is runtime.InProc's all-reduce on 2 devices (2 goroutines), as
// runtime's own BenchmarkAllReduce measures it; MB/s is the tensor's bytes per op.
func BenchmarkAllReduceInProc(b *testing.B) {
	if underMPIRun() {
		b.Skip("in-process half: run without mpirun")
	}
	group := []runtime.DeviceID{0, 1}
	for _, elems := range benchSizes {
		b.Run(fmt.Sprintf("elems=%d", elems), func(b *testing.B) {
			xs := []*kernels.Tensor{benchTensor(elems, 1), benchTensor(elems, 2)}
			tr := runtime.NewInProc(group)
			b.SetBytes(xs[0].Type.Bytes())
			b.ResetTimer()
			done := make(chan error, 2)
			for d := range group {
				go func() {
					for range b.N {
						if _, _, err := tr.AllReduce(context.Background(), group[d], group, xs[d]); err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
			}
			for range group {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// dpStep compiles a data-parallel MLP training step (4 layers of 256, batch 256, f32) for
// 2 devices and returns its programs and feeds.
func dpStep(b *testing.B) ([]*program.Program, runtime.Data) {
	_, progs, feeds := dpPlan(b)
	return progs, feeds
}

// dpPlan is dpStep with its plan.
func dpPlan(b *testing.B) (*autopar.Plan, []*program.Program, runtime.Data) {
	b.Helper()
	m := zoo.NewMLP()
	m.Layers, m.Hidden, m.Batch, m.In, m.Classes = 4, 256, 256, 256, 16
	g, err := m.Build()
	if err != nil {
		b.Fatal(err)
	}
	c, err := mesh.ParseCluster("cpu:2")
	if err != nil {
		b.Fatal(err)
	}
	p, err := autopar.Compile(context.Background(), g, c, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 1, PP: 1, DP: 2}})
	if err != nil {
		b.Fatal(err)
	}
	progs, err := p.Programs()
	if err != nil {
		b.Fatal(err)
	}
	full, err := passes.TrainingStep(p.Forward(), p.Optimizer.Optimizer())
	if err != nil {
		b.Fatal(err)
	}
	feeds := runtime.Data(interp.InitParams(full, 1))
	data, err := interp.GenerateInputs(full, 2)
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range data {
		feeds[k] = v
	}
	return p, progs, feeds
}

// BenchmarkDataParallelStepInProc is one training step of dpStep on runtime.Run.
func BenchmarkDataParallelStepInProc(b *testing.B) {
	if underMPIRun() {
		b.Skip("in-process half: run without mpirun")
	}
	progs, feeds := dpStep(b)
	b.ResetTimer()
	for range b.N {
		if _, err := runtime.Run(context.Background(), progs, feeds, runtime.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDataParallelStepMPI is the same step on a Session, one rank per device: the
// step, its barrier and the exchange of every rank's results included.
func BenchmarkDataParallelStepMPI(b *testing.B) {
	w := benchWorld(b)
	progs, feeds := dpStep(b)
	s, err := w.NewSession(context.Background(), progs, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var res *runtime.Result
	for range b.N {
		if res, err = s.Run(context.Background(), feeds, runtime.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	var host int64
	for _, d := range res.Devices {
		host += d.FeedBytes + d.StoreBytes
	}
	b.ReportMetric(float64(host)/1e6, "host-MB/step")
}

// BenchmarkDataParallelStepTrainerMPI is the same step on an autopar.Trainer over the
// ranks (TrainerOptions.Group): each rank keeps its params and momentum, and only the loss
// and the counters are exchanged. host-MB/step is what all devices loaded from and stored
// to the host (the data and the loss).
func BenchmarkDataParallelStepTrainerMPI(b *testing.B) {
	w := benchWorld(b)
	p, progs, feeds := dpPlan(b)
	s, err := w.NewSession(context.Background(), progs, 0)
	if err != nil {
		b.Fatal(err)
	}
	tr, err := autopar.NewTrainer(context.Background(), p, autopar.TrainerOptions{Seed: 1, Group: s})
	if err != nil {
		b.Fatal(err)
	}
	batch := autopar.Batch{}
	for name := range tr.Inputs() {
		batch[name] = feeds[name]
	}
	b.ResetTimer()
	for range b.N {
		if _, err := tr.Step(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	var host int64
	for _, d := range tr.LastResult().Devices {
		host += d.FeedBytes + d.StoreBytes
	}
	b.ReportMetric(float64(host)/1e6, "host-MB/step")
}

// quietRanks sends the output of every rank but 0 to /dev/null under mpirun, so that one
// copy of the benchmark lines is printed.
func quietRanks() {
	if underMPIRun() && os.Getenv("OMPI_COMM_WORLD_RANK") != "0" {
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			os.Stdout = null
		}
	}
}
