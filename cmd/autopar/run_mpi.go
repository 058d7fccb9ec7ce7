package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/runtime/mpi"
)

// runViaMPI is autopar run under mpirun (--transport mpi, or auto under mpirun): every rank
// checks that it was started on the same model and flags as rank 0; rank 0 compiles and
// broadcasts plan.json (the search has time limits, so ranks compiling on their own could
// disagree); every rank lowers the same programs and runs its own device with a Trainer
// over the ranks (trainLoop); only rank 0 prints and writes files. It reports false, doing nothing, when the transport is in-process.
func runViaMPI(ctx context.Context, stdout, stderr io.Writer, path string, f runFlags) (bool, error) {
	viaMPI, err := useMPI(f.transport)
	if err != nil || !viaMPI {
		return err != nil, err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return true, onMPI(stderr, func(w *mpi.World) error {
		out := stdout
		if w.Rank() != 0 {
			out = io.Discard
		}
		g, err := frontend.ParseFile(path)
		if err != nil {
			return err
		}
		digest := sha256.New()
		fmt.Fprintf(digest, "%s\n%+v\nsteps=%d seed=%d\n", autopar.ModelHash(g), f.compileFlags, f.steps, f.seed)
		if err := w.Agree(ctx, f.timeout, "model and flags", digest.Sum(nil)); err != nil {
			return err
		}
		var planJSON bytes.Buffer
		if w.Rank() == 0 {
			_, plan, err := compileModel(ctx, stderr, path, f.compileFlags)
			if err != nil {
				return err
			}
			if err := plan.WriteJSON(&planJSON); err != nil {
				return err
			}
		}
		data, err := w.Bcast(ctx, 0, planJSON.Bytes())
		if err != nil {
			return fmt.Errorf("receiving rank 0's plan: %w", err)
		}
		plan, err := autopar.ReadPlan(bytes.NewReader(data))
		if err != nil {
			return err
		}
		printSummary(out, plan)
		progs, err := plan.Programs()
		if err != nil {
			return err
		}
		o := f.loop()
		o.counters = true
		return trainOnRanks(ctx, out, w, plan, progs, o)
	})
}
