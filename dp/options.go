package dp

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Options steer [Solve].
type Options struct {
	Microbatches int              // B ≥ 1
	Schedule     program.Schedule // decides the activations a stage holds (see [InFlight])
	MaxStages    int              // 0 = no limit
	Constraints  Constraints
	// Progress, if set, is called from Solve's goroutine as t_max candidates are
	// processed, with done ≤ total; the last call has done == total.
	Progress func(done, total int)
}

// Constraints pin parts of the plan, for forced plans in tests and for users who know
// better. The zero value pins nothing.
type Constraints struct {
	// Boundaries, if non-nil, fixes the slicing: stage j runs layers
	// [Boundaries[j], Boundaries[j+1]). It starts at 0, ends at the layer count and
	// increases strictly; {0, L} is a single stage.
	Boundaries []int
	// Submesh and mesh.LogicalShape, if set, apply to every stage.
	Submesh *mesh.Submesh
	Logical *mesh.LogicalShape
	// StageSubmeshes and StageLogicals, if non-nil, pin stage j's submesh and logical mesh;
	// they need Boundaries and hold one entry per stage.
	StageSubmeshes []mesh.Submesh
	StageLogicals  []mesh.LogicalShape
}

// rules is Constraints checked and turned into dense lookups over layer starts.
type rules struct {
	stageAt []int // stage index of a stage starting at layer k under Boundaries; -1 if none
	pinned  bool  // Boundaries is set
	c       Constraints
}

func (o Options) validate(layers int, c Cluster) error {
	if layers <= 0 {
		return fmt.Errorf("dp: the model has %d layers, want at least 1", layers)
	}
	if o.Microbatches <= 0 {
		return fmt.Errorf("dp: %d micro-batches, want at least 1", o.Microbatches)
	}
	if o.Schedule != program.OneFOneB && o.Schedule != program.GPipe {
		return fmt.Errorf("dp: unknown pipeline schedule %d", int(o.Schedule))
	}
	if o.MaxStages < 0 {
		return fmt.Errorf("dp: max stages %d is negative", o.MaxStages)
	}
	return nil
}

// newRules checks the constraints against the model and cluster.
func newRules(k Constraints, layers int, c Cluster, maxStages int) (*rules, error) {
	r := &rules{c: k, stageAt: make([]int, layers+1)}
	for i := range r.stageAt {
		r.stageAt[i] = -1
	}
	if err := checkBoundaries(k.Boundaries, layers, c, maxStages); err != nil {
		return nil, err
	}
	if k.Boundaries != nil {
		r.pinned = true
		for j, b := range k.Boundaries[:len(k.Boundaries)-1] {
			r.stageAt[b] = j
		}
	}
	if err := checkPins(k, c); err != nil {
		return nil, err
	}
	return r, nil
}

func checkBoundaries(b []int, layers int, c Cluster, maxStages int) error {
	if b == nil {
		return nil
	}
	if len(b) < 2 || b[0] != 0 || b[len(b)-1] != layers {
		return fmt.Errorf("dp: stage boundaries %v must start at 0 and end at the layer count %d", b, layers)
	}
	for j := 1; j < len(b); j++ {
		if b[j] <= b[j-1] {
			return fmt.Errorf("dp: stage boundaries %v are not strictly increasing at index %d", b, j)
		}
	}
	stages := len(b) - 1
	if maxStages > 0 && stages > maxStages {
		return fmt.Errorf("dp: stage boundaries %v make %d stages, more than max stages %d", b, stages, maxStages)
	}
	if stages > c.Devices() {
		return fmt.Errorf("dp: stage boundaries %v make %d stages but the cluster has %d devices", b, stages, c.Devices())
	}
	return nil
}

// pinnedSubmeshes lists the submeshes k pins, as given.
func pinnedSubmeshes(k Constraints) []mesh.Submesh {
	subs := slices.Clone(k.StageSubmeshes)
	if k.Submesh != nil {
		subs = append(subs, *k.Submesh)
	}
	return subs
}

// pinnedLogicals lists the logical meshes k pins, as given.
func pinnedLogicals(k Constraints) []mesh.LogicalShape {
	logs := slices.Clone(k.StageLogicals)
	if k.Logical != nil {
		logs = append(logs, *k.Logical)
	}
	return logs
}

func checkPins(k Constraints, c Cluster) error {
	shapes := Submeshes(c)
	stages := len(k.Boundaries) - 1
	if (k.StageSubmeshes != nil || k.StageLogicals != nil) && k.Boundaries == nil {
		return fmt.Errorf("dp: per-stage submeshes or logical meshes need stage boundaries")
	}
	if k.StageSubmeshes != nil && len(k.StageSubmeshes) != stages {
		return fmt.Errorf("dp: %d stage submeshes for %d stages", len(k.StageSubmeshes), stages)
	}
	if k.StageLogicals != nil && len(k.StageLogicals) != stages {
		return fmt.Errorf("dp: %d stage logical meshes for %d stages", len(k.StageLogicals), stages)
	}
	for _, s := range pinnedSubmeshes(k) {
		if !c.legal(s) && !slices.Contains(shapes, s) {
			return fmt.Errorf("dp: submesh %v is not one of the cluster's shapes: 1x2^k dividing a host of %d devices, or nx%d with n ≤ %d",
				s, c.DevicesPerHost, c.DevicesPerHost, c.Hosts)
		}
	}
	logs := k.StageLogicals
	if k.Logical != nil {
		logs = append(slices.Clip(logs), *k.Logical)
	}
	for _, l := range logs {
		if l[0] <= 0 || l[1] <= 0 {
			return fmt.Errorf("dp: logical mesh %v must have positive axes", l)
		}
	}
	return checkPinSizes(k, stages)
}

// checkPinSizes rejects a pinned logical mesh whose size differs from a pinned submesh's
// for the same stage: no plan could honour both.
func checkPinSizes(k Constraints, stages int) error {
	for j := 0; j < max(stages, 1); j++ {
		var s *mesh.Submesh
		var l *mesh.LogicalShape
		if k.Submesh != nil {
			s = k.Submesh
		} else if k.StageSubmeshes != nil {
			s = &k.StageSubmeshes[j]
		}
		if k.Logical != nil {
			l = k.Logical
		} else if k.StageLogicals != nil {
			l = &k.StageLogicals[j]
		}
		if s != nil && l != nil && s.NumDevices() != l.NumDevices() {
			return fmt.Errorf("dp: logical mesh %v has %d devices but submesh %v has %d", *l, l.NumDevices(), *s, s.NumDevices())
		}
	}
	return nil
}

// rangeOK reports whether layers [start, end) may form one stage.
func (r *rules) rangeOK(start, end int) bool {
	if !r.pinned {
		return true
	}
	j := r.stageAt[start]
	return j >= 0 && r.c.Boundaries[j+1] == end
}

// meshOK reports whether a stage starting at layer start may use submesh s and logical l.
// It assumes rangeOK(start, ·) held.
func (r *rules) meshOK(start int, s mesh.Submesh, l mesh.LogicalShape) bool {
	if p := r.c.Submesh; p != nil && *p != s {
		return false
	}
	if p := r.c.Logical; p != nil && *p != l {
		return false
	}
	if !r.pinned {
		return true
	}
	j := r.stageAt[start]
	if r.c.StageSubmeshes != nil && r.c.StageSubmeshes[j] != s {
		return false
	}
	return r.c.StageLogicals == nil || r.c.StageLogicals[j] == l
}
