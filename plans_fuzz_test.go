package autopar

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/dp"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
)

// plansCase is one request FuzzPlansLower makes of Compile, decoded from the fuzzer's
// bytes: every field picks from a small menu, so that any input is a meaningful request.
type plansCase struct {
	model   string
	cluster *mesh.Cluster
	spec    string // how the cluster was asked for, for messages
	opts    Options
}

var fuzzModels = []string{"mlp-tiny", "gpt-tiny", "moe-tiny", "wresnet-tiny"}

// fuzzCluster decodes a cluster: cpu:1..8, dgx-a100:1, p3.16xlarge:1..2, or a JSON spec
// with odd host and device counts (through ParseClusterJSON, as --cluster file.json reads
// it). A spec Validate refuses is nil.
func fuzzCluster(t *testing.T, kind, n uint8) (*mesh.Cluster, string) {
	switch kind % 4 {
	case 0:
		spec := fmt.Sprintf("cpu:%d", 1+n%8)
		return cluster(t, spec), spec
	case 1:
		return cluster(t, "dgx-a100:1"), "dgx-a100:1"
	case 2:
		spec := fmt.Sprintf("p3.16xlarge:%d", 1+n%2)
		return cluster(t, spec), spec
	}
	c := cluster(t, "cpu")
	c.Name = ""
	c.Hosts = 1 + int(n%3)
	c.DevicesPerHost = []int{1, 2, 3, 4, 2, 1}[(n/3)%6]
	data, err := json.Marshal(c)
	require.NoError(t, err)
	got, err := mesh.ParseClusterJSON(data, "custom")
	require.NoError(t, err)
	return got, fmt.Sprintf("custom %d×%d", got.Hosts, got.DevicesPerHost)
}

// fuzzManual picks tp/pp/dp degrees whose product is the cluster's device count when pick
// is odd (the pick/2-th factorization, tp then pp ascending), none when it is even.
func fuzzManual(devices int, pick uint8) *Manual {
	if pick%2 == 0 {
		return nil
	}
	var all []*Manual
	for tp := 1; tp <= devices; tp++ {
		for pp := 1; tp*pp <= devices; pp++ {
			if devices%(tp*pp) == 0 {
				all = append(all, &Manual{TP: tp, PP: pp, DP: devices / (tp * pp)})
			}
		}
	}
	return all[int(pick/2)%len(all)]
}

func decodePlansCase(t *testing.T, mdl, ckind, cn, sched, mb, mem, manual, layers uint8) plansCase {
	c, spec := fuzzCluster(t, ckind, cn)
	pc := plansCase{model: fuzzModels[int(mdl)%len(fuzzModels)], cluster: c, spec: spec}
	o := &pc.opts
	o.Schedule = []string{"1f1b", "gpipe"}[sched%2]
	o.Optimizer = passes.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	if sched&2 != 0 {
		// Adam divides by √v: a gradient that is rounding noise on both sides (softmax
		// cancels attention's key bias) becomes a step of ±lr whose sign is the noise's.
		// eps 1e-2 keeps such noise (1e-9) from stepping; real gradients still do.
		o.Optimizer = passes.Optimizer{Kind: "adam", LR: 0.01, Eps: 1e-2}
	}
	o.Microbatches = []int{1, 2, 4, 8, 0}[mb%5] // 0: searched
	o.MemoryPerDevice = []int64{0, 0, 64 << 10, 256 << 10, 1 << 20}[mem%5]
	o.Manual = fuzzManual(c.Devices(), manual)
	o.Layers = []int{8, 1, 2, 3, 4}[layers%5]
	o.ILPTimeLimit = time.Second
	return pc
}

func (pc plansCase) String() string {
	o := pc.opts
	return fmt.Sprintf("%s on %s: schedule %s, %s, %d micro-batches, memory %d, manual %v, %d layers",
		pc.model, pc.spec, o.Schedule, o.Optimizer.Kind, o.Microbatches, o.MemoryPerDevice, o.Manual, o.Layers)
}

// FuzzPlansLower is issue 10's property: every plan Compile returns lowers to programs,
// reads back from its plan.json to the same programs, and — on at most 16 devices — runs
// on the runtime equal to the serial interpreter. Compile may refuse a request (no plan
// fits the memory, degrees that do not match the cluster, a batch the micro-batch count
// does not divide, a cluster the submeshes cannot tile); it must not return a plan that
// fails. The seeds run under go test; go test -run '^$' -fuzz FuzzPlansLower explores.
func FuzzPlansLower(f *testing.F) {
	// model, cluster kind, cluster count, schedule (+2: adam), micro-batches, memory,
	// manual (odd: degrees), layers (0: 8): see decodePlansCase.
	f.Add(uint8(1), uint8(0), uint8(7), uint8(0), uint8(0), uint8(0), uint8(7), uint8(0)) // gpt-tiny, cpu:8, tp=1,pp=8: deadlocked 1F1B
	f.Add(uint8(1), uint8(0), uint8(7), uint8(1), uint8(3), uint8(0), uint8(7), uint8(0)) // the same under GPipe
	f.Add(uint8(0), uint8(0), uint8(3), uint8(2), uint8(1), uint8(0), uint8(0), uint8(4)) // mlp-tiny, cpu:4, adam, searched
	f.Add(uint8(0), uint8(3), uint8(5), uint8(0), uint8(2), uint8(0), uint8(0), uint8(3)) // mlp-tiny, 3 hosts × 2 devices
	f.Add(uint8(2), uint8(0), uint8(1), uint8(0), uint8(1), uint8(0), uint8(0), uint8(2)) // moe-tiny, cpu:2
	f.Add(uint8(3), uint8(0), uint8(1), uint8(1), uint8(0), uint8(0), uint8(3), uint8(2)) // wresnet-tiny, cpu:2, tp=1,pp=2
	f.Add(uint8(0), uint8(2), uint8(1), uint8(0), uint8(1), uint8(2), uint8(0), uint8(2)) // mlp-tiny, p3.16xlarge:2, 64 KiB: memory error
	f.Add(uint8(0), uint8(3), uint8(7), uint8(0), uint8(1), uint8(0), uint8(0), uint8(0)) // mlp-tiny, 2 hosts × 3 devices: refused
	f.Fuzz(func(t *testing.T, mdl, ckind, cn, sched, mb, mem, manual, layers uint8) {
		pc := decodePlansCase(t, mdl, ckind, cn, sched, mb, mem, manual, layers)
		// Go's fuzzing engine calls an input that runs 10 s a crash ("deadlocked!"): a
		// search over 3 s on this machine (an ILP may run on to its 1 s limit after that,
		// and the run against serial follows) is skipped, not failed.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		p, err := Compile(ctx, model(t, pc.model), pc.cluster, pc.opts)
		if err != nil {
			if ctx.Err() != nil {
				t.Skipf("%v: compile takes over 3 s here", pc)
			}
			var me *dp.MemoryError
			if !errors.As(err, &me) {
				t.Logf("%v: refused: %v", pc, err)
			}
			return
		}
		checkPlanLowers(t, p, pc)
	})
}

// checkPlanLowers lowers p, reads its plan.json back and lowers that to the same programs,
// and runs it against serial when it has at most 16 devices.
func checkPlanLowers(t *testing.T, p *Plan, pc plansCase) {
	progs, err := p.Programs()
	require.NoError(t, err, "%v: the plan Compile returned does not lower", pc)
	var buf bytes.Buffer
	require.NoError(t, p.WriteJSON(&buf))
	q, err := ReadPlan(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err, "%v: ReadPlan refuses the plan Compile wrote", pc)
	again, err := q.Programs()
	require.NoError(t, err, "%v: the plan read back does not lower", pc)
	require.Len(t, again, len(progs))
	for i := range progs {
		require.Equal(t, progs[i].String(), again[i].String(), "%v: device %d's program after a round trip", pc, i)
	}
	if pc.cluster.Devices() <= 16 {
		checkAgainstSerialSteps(t, p, 1e-4, 1)
	}
}
