package mpi_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
	"github.com/autopar/autopar/runtime/mpi"
)

// The Trainer over MPI: each rank holds only its own device's params and state
// (TrainerOptions.Group), and the losses of every step, the final params, gathered on
// demand, and a checkpoint saved by rank 0 equal the in-process Trainer's bit for bit,
// with the serial check on; every rank moves the same bytes between host and device as
// in-process (the data in; the loss and the checked gradients out: TestTrainerHostsNothing
// shows that without the check only the loss comes out).

const trainerEnv = "AUTOPAR_MPI_TRAINER" // the directory of trainer cases a worker runs

const trainerSteps = 3

// trainerResult is what rank 0 writes back.
type trainerResult struct {
	Losses  []float64
	Params  map[string]*kernels.Tensor
	Devices []runtime.DeviceStats
	Hosted  []string
}

var trainerCases = []mpiCase{
	{"mlp-dp", "mlp-tiny", 2, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 1, PP: 1, DP: 2}}, 0},
	{"gpt-tp2-pp2", "gpt-tiny", 4, autopar.Options{Microbatches: 2, Layers: 2, Manual: &autopar.Manual{TP: 2, PP: 2, DP: 1}}, 0},
}

// batchOf is step's data for plan p's model, the same on every rank.
func batchOf(p *autopar.Plan, step int) (autopar.Batch, error) {
	full, err := passes.TrainingStep(p.Forward(), p.Optimizer.Optimizer())
	if err != nil {
		return nil, err
	}
	data, err := interp.GenerateInputs(full, int64(100+step))
	if err != nil {
		return nil, err
	}
	b := autopar.Batch{}
	for k, v := range data {
		b[k] = v
	}
	return b, nil
}

func TestMPITrainerEqualsInProcess(t *testing.T) {
	bin := requireMPI(t)
	root := t.TempDir()
	want := map[string]trainerResult{}
	for _, c := range trainerCases {
		dir := filepath.Join(root, fmt.Sprintf("np%d", c.n), c.name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		g, err := frontend.ParseFile("../../testdata/models/" + c.model + ".ir")
		require.NoError(t, err)
		cl, err := mesh.ParseCluster(fmt.Sprintf("cpu:%d", c.n))
		require.NoError(t, err)
		c.opts.Optimizer = passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
		p, err := autopar.Compile(context.Background(), g, cl, c.opts)
		require.NoError(t, err)
		f, err := os.Create(filepath.Join(dir, "plan.json"))
		require.NoError(t, err)
		require.NoError(t, p.WriteJSON(f))
		require.NoError(t, f.Close())
		p, err = autopar.ReadPlanFile(filepath.Join(dir, "plan.json"))
		require.NoError(t, err)
		r, err := train(context.Background(), p, nil, filepath.Join(dir, "inproc.safetensors"))
		require.NoError(t, err)
		want[c.name] = *r
	}
	for _, n := range []int{2, 4} {
		out, err := mpirun(t, bin, n, filepath.Join(root, fmt.Sprintf("np%d", n)), trainerEnv+"=1")
		require.NoError(t, err, "mpirun -np %d:\n%s", n, out)
	}
	for _, c := range trainerCases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprintf("np%d", c.n), c.name)
			var got trainerResult
			readGob(t, filepath.Join(dir, "result.gob"), &got)
			w := want[c.name]
			require.Equal(t, w.Losses, got.Losses, "losses over MPI and in-process")
			require.Empty(t, got.Hosted)
			sameResult(t, "params", stepResult{Stores: w.Params}, stepResult{Stores: got.Params})
			for i, d := range got.Devices {
				require.Equal(t, w.Devices[i].FeedBytes, d.FeedBytes, "device %d: only the data from the host", d.Device)
				require.Equal(t, w.Devices[i].StoreBytes, d.StoreBytes, "device %d: the loss and, for the serial check, the gradients to the host", d.Device)
				require.Equal(t, w.Devices[i].BytesSent, d.BytesSent, "device %d", d.Device)
			}
			a, err := os.ReadFile(filepath.Join(dir, "inproc.safetensors"))
			require.NoError(t, err)
			b, err := os.ReadFile(filepath.Join(dir, "mpi.safetensors"))
			require.NoError(t, err, "rank 0 saves the checkpoint")
			require.Equal(t, a, b, "the checkpoint saved over MPI is the in-process one")
		})
	}
}

// train runs trainerSteps steps with the serial check on and saves a checkpoint to save.
func train(ctx context.Context, p *autopar.Plan, group runtime.Group, save string) (*trainerResult, error) {
	tr, err := autopar.NewTrainer(ctx, p, autopar.TrainerOptions{Seed: 1, CheckSerial: true, Group: group, Timeout: time.Minute})
	if err != nil {
		return nil, err
	}
	r := &trainerResult{Hosted: tr.Hosted()}
	for step := 1; step <= trainerSteps; step++ {
		b, err := batchOf(p, step)
		if err != nil {
			return nil, err
		}
		loss, err := tr.Step(ctx, b)
		if err != nil {
			return nil, err
		}
		if math.IsNaN(loss) {
			return nil, fmt.Errorf("step %d: loss is NaN", step)
		}
		r.Losses = append(r.Losses, loss)
	}
	r.Devices = tr.LastResult().Devices
	if r.Params, err = tr.Params(); err != nil {
		return nil, err
	}
	return r, tr.Save(save)
}

// trainerWorker runs every trainer case of dir (its plan.json) on this rank.
func trainerWorker(w *mpi.World, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, e := range entries {
		cdir := filepath.Join(dir, e.Name())
		p, err := autopar.ReadPlanFile(filepath.Join(cdir, "plan.json"))
		if err != nil {
			return err
		}
		progs, err := p.Programs()
		if err != nil {
			return err
		}
		s, err := w.NewSession(ctx, progs, time.Minute)
		if err != nil {
			return err
		}
		r, err := train(ctx, p, s, filepath.Join(cdir, "mpi.safetensors"))
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
		if w.Rank() == 0 {
			var buf bytes.Buffer
			if err := gob.NewEncoder(&buf).Encode(r); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(cdir, "result.gob"), buf.Bytes(), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
