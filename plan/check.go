package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/program"
)

// Check runs on a plan that holds its graphs (AttachGraphs) the checks ReadPlan runs on a
// plan.json it reads: the meaning of every field, every layout fits its value, and codegen
// accepts the stage assignment and every strategy. The compiler's search phase is verified
// with it.
func (p *Plan) Check() error {
	if err := p.checkMeaning(); err != nil {
		return err
	}
	return p.checkStep()
}

// checkMeaning checks what plan.json says beyond its syntax, before the model is rebuilt:
// a known schedule and optimizer, stages that tile the layers in order on disjoint devices
// of the cluster, in-flight counts the schedule implies, and numbers that are finite and
// not negative. A hand-edited plan.json can parse and still say none of this.
func (p *Plan) checkMeaning() error {
	if _, err := program.ParseSchedule(p.Schedule); err != nil {
		return fmt.Errorf("plan: schedule %q is not gpipe or 1f1b", p.Schedule)
	}
	if p.Manual != "" {
		if _, err := ParseManual(p.Manual); err != nil {
			return fmt.Errorf("plan: manual: %w", err)
		}
	}
	if !finite(p.ILPTimeLimit) {
		return fmt.Errorf("plan: ilp_time_limit_s %v, expected a finite number of seconds ≥ 0", p.ILPTimeLimit)
	}
	if p.BatchNorm != "" && p.BatchNorm != BatchNormMicrobatch {
		return fmt.Errorf("plan: batch_norm %q, expected %q or none", p.BatchNorm, BatchNormMicrobatch)
	}
	if p.Batch < 1 || p.Microbatches < 1 || p.Batch%p.Microbatches != 0 {
		return fmt.Errorf("plan: batch %d in %d micro-batches, expected a positive batch the micro-batch count divides", p.Batch, p.Microbatches)
	}
	if len(p.Layers) == 0 || len(p.Stages) == 0 {
		return fmt.Errorf("plan: %d layers and %d stages, expected at least one of each", len(p.Layers), len(p.Stages))
	}
	for l, ly := range p.Layers {
		if !finite(ly.FLOPs) || ly.InBytes < 0 {
			return fmt.Errorf("plan: layer %d: flops %v, in_bytes %d, expected numbers ≥ 0", l, ly.FLOPs, ly.InBytes)
		}
	}
	if err := p.checkStageOrder(); err != nil {
		return err
	}
	if err := p.checkDevices(); err != nil {
		return err
	}
	for si := range p.Stages {
		if err := p.checkStageNumbers(si); err != nil {
			return err
		}
	}
	return checkPrediction(&p.Predicted)
}

// checkStageOrder checks that the stages run layers 0 … L−1 in order, each a non-empty
// range starting where the one before ended, and that every value's layer exists.
func (p *Plan) checkStageOrder() error {
	next := 0
	for si, s := range p.Stages {
		if s.FirstLayer != next || s.LastLayer < s.FirstLayer || s.LastLayer >= len(p.Layers) {
			return fmt.Errorf("plan: stage %d runs layers %d…%d, expected layers from %d to at most %d, in order and not overlapping",
				si, s.FirstLayer, s.LastLayer, next, len(p.Layers)-1)
		}
		next = s.LastLayer + 1
		for _, v := range s.Values {
			if v.Layer < 0 || v.Layer >= len(p.Layers) {
				return fmt.Errorf("plan: stage %d: value %s is in layer %d, expected 0…%d", si, v.Name, v.Layer, len(p.Layers)-1)
			}
		}
	}
	if next != len(p.Layers) {
		return fmt.Errorf("plan: the stages end at layer %d, expected them to run all %d layers", next-1, len(p.Layers))
	}
	return nil
}

// checkDevices checks that each stage's submesh and logical mesh fit the cluster and that
// no device is in two stages. checkLayouts later checks the devices are the submesh's.
func (p *Plan) checkDevices() error {
	c := &p.Cluster
	owner := map[int]int{}
	for si, s := range p.Stages {
		sub, l := s.Submesh, s.Logical
		if sub.Hosts < 1 || sub.Hosts > c.Hosts || sub.Devices < 1 || sub.Devices > c.DevicesPerHost {
			return fmt.Errorf("plan: stage %d: submesh %s does not fit cluster %s", si, sub, c)
		}
		n := sub.Hosts * sub.Devices
		if l[0] < 1 || l[1] < 1 || l[0] > n || l[1] > n || l[0]*l[1] != n {
			return fmt.Errorf("plan: stage %d: logical mesh %s does not cover submesh %s of %d devices", si, l, sub, n)
		}
		for _, d := range s.Devices {
			if d < 0 || d >= c.Devices() {
				return fmt.Errorf("plan: stage %d: device %d is not in cluster %s", si, d, c)
			}
			if j, dup := owner[d]; dup {
				return fmt.Errorf("plan: device %d is in stage %d and stage %d, expected each device in one stage", d, j, si)
			}
			owner[d] = si
		}
	}
	return nil
}

// checkStageNumbers checks stage si's predictions and the activations it holds: the
// in-flight count is what the schedule implies for its place in the pipeline.
func (p *Plan) checkStageNumbers(si int) error {
	s := &p.Stages[si]
	for _, x := range []float64{s.Time, s.StepTime, s.StepComm, s.RecvTime, s.StepRecvTime, s.Cost.Compute, s.Cost.Communication, s.Cost.Resharding, s.Cost.Data, s.Cost.Total, s.ILP.Objective} {
		if !finite(x) {
			return fmt.Errorf("plan: stage %d: time or cost %v, expected a finite number ≥ 0", si, x)
		}
	}
	ilp := s.ILP
	for _, n := range []int{ilp.Values, ilp.Nodes, ilp.Variables, ilp.EdgeVars, ilp.Rows, ilp.MemoryRows, ilp.TiedGroups, ilp.Rounds} {
		if n < 0 {
			return fmt.Errorf("plan: stage %d: ILP count %d, expected ≥ 0", si, n)
		}
	}
	if s.WeightBytes < 0 || s.ActBytes < 0 || s.MemoryBytes < 0 || s.RecomputeBytes < 0 {
		return fmt.Errorf("plan: stage %d: weight_bytes %d, activation_bytes %d, recompute_bytes %d, memory_bytes %d, expected byte counts ≥ 0",
			si, s.WeightBytes, s.ActBytes, s.RecomputeBytes, s.MemoryBytes)
	}
	for name, t := range map[string]*Transfers{"sent": s.Sent, "received": s.Received} {
		if t != nil && (t.Pieces < 0 || t.Bytes < 0 || t.StepPieces < 0 || t.StepBytes < 0) {
			return fmt.Errorf("plan: stage %d: %s %+v, expected counts ≥ 0", si, name, *t)
		}
	}
	if s.RecomputeLayers && !s.Recompute {
		return fmt.Errorf("plan: stage %d: recompute_layers of a stage that does not recompute", si)
	}
	if s.RecomputeBytes > 0 && !s.Recompute {
		return fmt.Errorf("plan: stage %d: recompute_bytes %d of a stage that does not recompute", si, s.RecomputeBytes)
	}
	sched, _ := program.ParseSchedule(p.Schedule)
	want := p.Microbatches
	if sched == program.OneFOneB {
		want = min(len(p.Stages)-si, p.Microbatches)
	}
	if s.InFlight != want {
		return fmt.Errorf("plan: stage %d: in_flight %d, expected %d (%s, %d stages, %d micro-batches)",
			si, s.InFlight, want, p.Schedule, len(p.Stages), p.Microbatches)
	}
	for _, v := range s.Values {
		if !finite(v.Compute) || !finite(v.Comm) {
			return fmt.Errorf("plan: stage %d: value %s: compute %v, comm %v, expected finite numbers ≥ 0", si, v.Name, v.Compute, v.Comm)
		}
	}
	return nil
}

func checkPrediction(pr *Prediction) error {
	for _, x := range []float64{pr.StepTime, pr.Compute, pr.Communication, pr.Bubble, pr.Sync, pr.Update, pr.SendRecv, pr.FLOPs, pr.SamplesPerSecond, pr.TFLOPSPerDevice, pr.MFU} {
		if !finite(x) {
			return fmt.Errorf("plan: predicted %v, expected finite times, rates and FLOPs ≥ 0", x)
		}
	}
	if pr.DeviceMemory <= 0 || pr.Solves < 0 {
		return fmt.Errorf("plan: predicted device_memory %d, ilp_solves %d, expected a positive memory and a count ≥ 0", pr.DeviceMemory, pr.Solves)
	}
	return nil
}

// finite reports x ≥ 0 and finite.
func finite(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }

// checkStep checks the plan against the training step rebuilt from its model: every
// layout fits its value, and codegen accepts the stage assignment and every strategy
// (codegen.Check, the checks Lower runs first).
func (p *Plan) checkStep() error {
	if err := p.checkLayouts(); err != nil {
		return err
	}
	cp, err := p.CodegenPlan()
	if err != nil {
		return err
	}
	if err := codegen.Check(cp); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// CheckFor returns an error unless the plan was compiled for forward graph g on cluster c:
// what a command that takes both a model and a plan checks first.
func (p *Plan) CheckFor(g *ir.Graph, c *mesh.Cluster) error {
	if err := p.CheckModel(g); err != nil {
		return err
	}
	return p.CheckCluster(c)
}

// clusterDiff names the first field of the cluster spec where a and b differ, with both
// values, or returns "" when they are equal.
func clusterDiff(a, b *mesh.Cluster) string {
	va, vb := reflect.ValueOf(*a), reflect.ValueOf(*b)
	for i := range va.NumField() {
		if x, y := va.Field(i).Interface(), vb.Field(i).Interface(); !reflect.DeepEqual(x, y) {
			name, _, _ := strings.Cut(va.Type().Field(i).Tag.Get("json"), ",")
			return fmt.Sprintf("%s %s, not %s", name, clusterValue(x), clusterValue(y))
		}
	}
	return ""
}

// clusterValue prints a cluster field: the roofline table and the collective fits as
// their JSON, the rest as Go prints them.
func clusterValue(v any) string {
	switch v.(type) {
	case *mesh.FLOPTable, []mesh.CollectiveFit:
		data, err := json.Marshal(v)
		if err == nil {
			return string(data)
		}
	}
	return fmt.Sprint(v)
}
