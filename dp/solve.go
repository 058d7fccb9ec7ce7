package dp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Stage is one pipeline stage of a plan.
type Stage struct {
	Start, End int // layers [Start, End)
	Submesh    mesh.Submesh
	Logical    mesh.LogicalShape
	Cost       StageCost // its Time holds Recv
	Recv       float64   // the price of its receives per micro-batch where it sits (Receiver)
	InFlight   int       // micro-batches whose activations the stage holds at its peak
	Memory     float64   // per-device bytes: Cost.WeightBytes + InFlight·Cost.ActBytes
	Devices    []int     // device IDs host·DevicesPerHost+j, host-major (see the package doc)
}

// Result is the plan Solve picks and what it predicts.
type Result struct {
	Stages  []Stage
	Time    float64 // predicted iteration time: Compute + Bubble + Step
	Compute float64 // Σ_i t_i: one micro-batch through every stage
	Bubble  float64 // (B−1)·max_j t_j: the other micro-batches behind the slowest stage
	Step    float64 // the first stage's step part (gradient sync, update), run once at the end
	MaxTime float64 // max_j t_j
	// Placed: the stages' Devices are where the search priced their receives (a
	// Receiver's, on the ring); otherwise Place tiled them after the search.
	Placed bool
	Stats  Stats
}

// Stats says how much work the t_max search did.
type Stats struct {
	Candidates int // distinct stage times, the t_max values Alpa's loop enumerates
	Evaluated  int // passes of the recurrence, including the one with no t_max
	Skipped    int // candidates below the stop point that the step search showed cannot win
	Pruned     int // candidates at or above the early-stop point, never looked at
}

// MemoryError is returned when plans exist but none fits in device memory.
type MemoryError struct {
	Layers       int
	Cluster      Cluster
	Schedule     program.Schedule
	Microbatches int
	Need         float64 // the least MemoryPerDevice for which some plan fits
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("dp: no pipeline plan fits in memory: %d layers on %d×%d devices with %s per device under %v with %d micro-batches; the smallest per-device memory that would fit is %s",
		e.Layers, e.Cluster.Hosts, e.Cluster.DevicesPerHost, gib(e.Cluster.MemoryPerDevice), e.Schedule, e.Microbatches, gib(e.Need))
}

// gib prints a byte count in GiB or MiB, with the exact count beside it; small counts (the
// synthetic costs of tests) as they are.
func gib(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.4g GiB (%.0f bytes)", b/(1<<30), b)
	case b >= 1<<20:
		return fmt.Sprintf("%.4g MiB (%.0f bytes)", b/(1<<20), b)
	}
	return fmt.Sprintf("%.6g bytes", b)
}

// ErrNoPlan is returned (wrapped) when no plan exists even with unlimited memory: the oracle
// has no sharding for the stages the constraints leave, or they cannot tile the cluster.
var ErrNoPlan = errors.New("dp: no pipeline plan exists")

// Solve picks the pipeline plan for layers layers on cluster c that minimises
// Σ t_i + (B−1)·max t_j + u_0, with costs from o: t_i is stage i's micro-batch time
// (StageCost.Time) and u_0 the first stage's step part (StageCost.Step). Under GPipe and
// 1F1B alike every stage runs its step part (gradient sync, optimizer update) once, after
// its own last backward, and the last backward of the step is the first stage's (the last
// micro-batch's gradient flows back to it through every other stage), so u_0 is on the
// critical path. Stage i > 0 finished its last backward earlier, by the last micro-batch's
// backward through stages 0..i−1, and its step part runs meanwhile: the model takes it as
// hidden there (docs/DECISIONS.md says when it is not). It runs Alpa's loop over t_max (the distinct
// stage times, ascending) with the early stop B·t_max ≥ best; within it, t_max values where
// the recurrence's value cannot have changed are skipped by a galloping search (F is a
// non-increasing step function of t_max, and only the first t_max of each step can win).
// It returns ctx.Err() if ctx ends, a *MemoryError if nothing fits in memory, and an error
// wrapping ErrNoPlan if nothing exists at all.
func Solve(ctx context.Context, layers int, c Cluster, o Oracle, opts Options) (*Result, error) {
	return solve(ctx, layers, c, o, opts, false)
}

// solve is Solve with the plain Alpa loop selectable, for tests and benchmarks.
func solve(ctx context.Context, layers int, c Cluster, o Oracle, opts Options, plain bool) (*Result, error) {
	if o == nil {
		return nil, errors.New("dp: nil cost oracle")
	}
	r, lv, err := check(layers, c, opts)
	if err != nil {
		return nil, err
	}
	t, err := buildTable(ctx, layers, c, o, lv, r)
	if err != nil {
		return nil, err
	}
	s := newSearch(t, c, opts, true)
	s.plain = plain
	err = s.run(ctx)
	var me *MemoryError
	if err != nil && s.rec.restricts() && ctx.Err() == nil && (errors.Is(err, ErrNoPlan) || errors.As(err, &me)) {
		// No sequence of stages that fits lies on the ring: any tiling, receives priced by
		// the cheaper link they may take (a lower bound), placed by Place.
		s = newSearch(t, c, opts, false)
		s.plain = plain
		err = s.run(ctx)
	}
	if err != nil {
		return nil, err
	}
	return s.result(), nil
}

// Check returns the error Solve would return for layers, c and opts before it asks the
// oracle anything: a cluster the shapes cannot tile, bad options or constraints, or a
// search past MaxSearchStates. A caller that prices stages ahead of Solve (in parallel,
// say) checks first, so that a refused search costs nothing.
func Check(layers int, c Cluster, opts Options) error {
	_, _, err := check(layers, c, opts)
	return err
}

func check(layers int, c Cluster, opts Options) (*rules, levels, error) {
	if err := c.validate(); err != nil {
		return nil, levels{}, err
	}
	if err := opts.validate(layers, c); err != nil {
		return nil, levels{}, err
	}
	r, err := newRules(opts.Constraints, layers, c, opts.MaxStages)
	if err != nil {
		return nil, levels{}, err
	}
	lv := newLevels(layers, c, opts)
	subs, _ := shapes(c, opts.Constraints)
	if err := checkSize(layers, c, lv, subs); err != nil {
		return nil, levels{}, err
	}
	return r, lv, nil
}

// candidates lists the distinct finite stage times in ascending order, each with every
// receive price its stage may take (recurrence.combos): each slot's fastest and, for
// first stages, every one that fits (see recurrence.firstTimes).
func candidates(r *recurrence) []float64 {
	t := r.t
	out := r.firstTimes()
	cells := len(t.costs)
	for x, v := range t.bestT {
		if !math.IsInf(v, 1) {
			cell := x % cells
			for _, c := range r.combos(cell % len(t.subs)) {
				out = append(out, v+r.add(cell, c))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
