package dp

import (
	"fmt"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Oracle prices one pipeline stage. In production it is the intra-operator sharding pass
// (one ILP per call); in tests, synthetic tables. [Solve] calls it once per (layer range,
// submesh, logical mesh) it needs, from one goroutine, in a fixed order, so an
// implementation need not be safe for concurrent use.
type Oracle interface {
	// StageCost returns the cost of running layers [start, end) as one pipeline stage on
	// submesh s with logical mesh l — per micro-batch (forward + backward) and once per step
	// (gradient sync, optimizer update) — and ok=false if no sharding of it exists on that
	// mesh.
	StageCost(start, end int, s mesh.Submesh, l mesh.LogicalShape) (c StageCost, ok bool)
}

// StageCost is what one stage costs on one (submesh, logical mesh).
type StageCost struct {
	Time        float64 // seconds per micro-batch, forward + backward
	Step        float64 // seconds once per step, after the last backward: gradient sync, update
	WeightBytes float64 // per device: params, grads, optimizer state (held once)
	ActBytes    float64 // per device: activations one in-flight micro-batch keeps alive
	// OnceBytes is per device what the stage holds at its peak besides the in-flight
	// micro-batches' ActBytes: 0, or under Recompute the activations of the one
	// micro-batch whose backward runs.
	OnceBytes float64
	// Recompute is set when the stage recomputes its activations in the backward (it then
	// keeps only its inputs in flight: ActBytes); Checkpoints, besides, when it keeps
	// each layer's input and recomputes one layer at a time.
	Recompute, Checkpoints bool
	// Remat lists other ways to run the same stage (with recomputation): the search takes,
	// per stage, the fastest of the cost and these among those that fit the device memory,
	// the earliest on ties.
	Remat []StageCost
}

// Memory is the per-device bytes the stage needs with inflight micro-batches alive.
func (c StageCost) Memory(inflight int) float64 {
	return c.WeightBytes + float64(inflight)*c.ActBytes + c.OnceBytes
}

func (c StageCost) validate() error {
	bad := func(x float64) bool { return !(x >= 0) || x > maxFinite }
	if bad(c.Time) || bad(c.Step) || bad(c.WeightBytes) || bad(c.ActBytes) || bad(c.OnceBytes) {
		once := ""
		if c.OnceBytes != 0 {
			once = fmt.Sprintf(", activations held once %g", c.OnceBytes)
		}
		return fmt.Errorf("time %g, step %g, weights %g, activations %g%s: each must be finite and non-negative",
			c.Time, c.Step, c.WeightBytes, c.ActBytes, once)
	}
	if len(c.Remat) > 8 {
		return fmt.Errorf("%d recomputing costs, expected at most 8", len(c.Remat))
	}
	for _, r := range c.Remat {
		if r.Remat != nil {
			return fmt.Errorf("a recomputing cost offers more recomputing costs")
		}
		if err := r.validate(); err != nil {
			return err
		}
	}
	return nil
}

const maxFinite = 1.7976931348623157e308

// InFlight is the number of micro-batches whose activations a stage keeps alive at its peak
// when it has remaining stages at and after it (S−i for stage i of S, 0-based) and the
// iteration runs b micro-batches. Under 1F1B it is min(remaining, b): a stage cannot hold
// more micro-batches than exist. Under GPipe it is b.
func InFlight(s program.Schedule, remaining, b int) int {
	if s == program.GPipe || remaining > b {
		return b
	}
	return remaining
}

// Receiver is an Oracle that also prices what a stage receives per micro-batch from the
// other stages, by the link each value crosses. With it, [Solve] lays the stages out as
// it prices them (see the package doc, "Stages where they sit"): a receive from a stage
// on the same host pays Same, one from another host Cross, as the plan's prediction
// prices the transfers once the stages sit on their devices. Without it, receives are
// free to the search and any tiling of the submeshes serves ([Place]).
type Receiver interface {
	Oracle
	// Receives prices what layers [start, end) on submesh s receive per micro-batch. It
	// does not depend on the logical mesh (the receiver's device count and host set fix
	// the link and the share each device takes).
	Receives(start, end int, s mesh.Submesh) Receives
}

// Receives is a stage's receives per micro-batch, split by the stage that sends them.
type Receives struct {
	// Before: values made by layer start−1, which the previous stage holds; for a first
	// stage (start = 0), by the last layer, which the last stage holds.
	Before Link
	// After: values made by layer end, which the next stage holds; for a last stage, by
	// layer 0, which the first stage holds.
	After Link
	// Far: values from any other stage, priced by the cheapest link they may cross
	// (where they sit is not known to the search: a lower bound).
	Far float64
}

// Link prices the same bytes on the two links a transfer can take: from a stage on the
// receiver's own host, and from another host.
type Link struct{ Same, Cross float64 }

func (r Receives) validate() error {
	bad := func(x float64) bool { return !(x >= 0) || x > maxFinite }
	if bad(r.Before.Same) || bad(r.Before.Cross) || bad(r.After.Same) || bad(r.After.Cross) || bad(r.Far) {
		return fmt.Errorf("receives %+v: each must be finite and non-negative", r)
	}
	return nil
}
