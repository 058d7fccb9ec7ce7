package autopar

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
)

// twoStagePlan is mlp-tiny on cpu:4 as tp=1,pp=2,dp=2 with 2 micro-batches under 1F1B:
// stage 0 on devices 0–1 holds 2 micro-batches in flight, stage 1 on 2–3 holds 1.
func twoStagePlan(t *testing.T) []byte {
	p := compile(t, model(t, "mlp-tiny"), cluster(t, "cpu:4"), Options{Microbatches: 2, Manual: &Manual{TP: 1, PP: 2, DP: 2}})
	var buf bytes.Buffer
	require.NoError(t, p.WriteJSON(&buf))
	return buf.Bytes()
}

// editPlan decodes plan.json, lets edit change it, and encodes it again.
func editPlan(t *testing.T, good []byte, edit func(p map[string]any, stages []any)) []byte {
	var m map[string]any
	require.NoError(t, json.Unmarshal(good, &m))
	edit(m, m["stages"].([]any))
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

func stage(stages []any, i int) map[string]any { return stages[i].(map[string]any) }

// ReadPlan checks what a plan means, not only its syntax: issue 10's catalogue of
// hand-edited plans that explain and render used to accept.
func TestReadPlanRefusesNonsense(t *testing.T) {
	good := twoStagePlan(t)
	_, err := ReadPlan(bytes.NewReader(good))
	require.NoError(t, err)
	cases := []struct {
		name string
		edit func(p map[string]any, stages []any)
		want string
	}{
		{"stages share a device", func(_ map[string]any, s []any) { stage(s, 1)["devices"] = []any{0, 1} },
			"device 0 is in stage 0 and stage 1"},
		{"device outside the cluster", func(_ map[string]any, s []any) { stage(s, 1)["devices"] = []any{2, 9} },
			"device 9 is not in cluster"},
		{"layer out of range", func(_ map[string]any, s []any) { stage(s, 1)["last_layer"] = 99 }, "stage 1 runs layers"},
		{"overlapping stages", func(_ map[string]any, s []any) { stage(s, 1)["first_layer"] = 0 }, "stage 1 runs layers 0"},
		{"reversed stages", func(_ map[string]any, s []any) { s[0], s[1] = s[1], s[0] }, "stage 0 runs layers"},
		{"reversed range", func(_ map[string]any, s []any) {
			stage(s, 1)["first_layer"], stage(s, 1)["last_layer"] = stage(s, 1)["last_layer"], stage(s, 1)["first_layer"]
		}, "stage 1 runs layers"},
		{"layers left over", func(p map[string]any, _ []any) {
			p["layers"] = append(p["layers"].([]any), map[string]any{"flops": 1, "in_bytes": 0})
		}, "expected them to run all"},
		{"no layers", func(p map[string]any, _ []any) { p["layers"] = []any{} }, "0 layers"},
		{"value in no layer", func(_ map[string]any, s []any) {
			stage(s, 0)["values"].([]any)[0].(map[string]any)["layer"] = 99
		}, "is in layer 99"},
		{"negative in_flight", func(_ map[string]any, s []any) { stage(s, 0)["in_flight"] = -3 }, "in_flight -3, expected 2"},
		{"in_flight the schedule does not imply", func(_ map[string]any, s []any) { stage(s, 1)["in_flight"] = 2 }, "in_flight 2, expected 1"},
		{"unknown schedule", func(p map[string]any, _ []any) { p["schedule"] = "zigzag" }, `schedule "zigzag" is not gpipe or 1f1b`},
		{"negative prediction", func(p map[string]any, _ []any) { p["predicted"].(map[string]any)["step_time"] = -1 }, "predicted -1"},
		{"negative stage time", func(_ map[string]any, s []any) { stage(s, 0)["time"] = -0.5 }, "stage 0: time or cost -0.5"},
		{"negative bytes", func(_ map[string]any, s []any) { stage(s, 0)["weight_bytes"] = -1 }, "weight_bytes -1"},
		{"no device memory", func(p map[string]any, _ []any) { p["predicted"].(map[string]any)["device_memory"] = 0 }, "device_memory 0"},
		{"micro-batches that do not divide", func(p map[string]any, _ []any) { p["microbatches"] = 3 }, "batch 16 in 3 micro-batches"},
		{"another batch", func(p map[string]any, _ []any) { p["batch"] = 32 }, "batch 32, but its model mlp has batch 16"},
		{"logical mesh off the submesh", func(_ map[string]any, s []any) { stage(s, 0)["logical_mesh"] = []any{3, 1} }, "logical mesh 3x1 does not cover"},
		{"submesh larger than a host", func(_ map[string]any, s []any) {
			stage(s, 0)["submesh"] = map[string]any{"hosts": 1, "devices": 8}
		}, "submesh 1x8 does not fit"},
		{"bad manual degrees", func(p map[string]any, _ []any) { p["manual"] = "zz=2" }, "unknown degree"},
		{"negative ILP time limit", func(p map[string]any, _ []any) { p["ilp_time_limit_s"] = -1 }, "ilp_time_limit_s -1"},
		{"value of another model", func(_ map[string]any, s []any) {
			stage(s, 0)["values"].([]any)[0].(map[string]any)["name"] = "nope"
		}, "value nope"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bad := editPlan(t, good, tc.edit)
			_, err := ReadPlan(bytes.NewReader(bad))
			require.ErrorContains(t, err, tc.want)
			checkBadPlanFile(t, tc.name, bad, tc.want)
		})
	}
	_, err = ReadPlan(bytes.NewReader(append(append([]byte{}, good...), "{}"...)))
	require.ErrorContains(t, err, "data after the plan")
	_, err = ReadPlan(strings.NewReader(strings.Repeat(" ", MaxPlanBytes+1)))
	require.ErrorContains(t, err, "plan.MaxPlanBytes")
}

// CheckFor names what differs: the model, its batch, or the first field of the cluster.
func TestPlanCheckFor(t *testing.T) {
	p, err := ReadPlan(bytes.NewReader(twoStagePlan(t)))
	require.NoError(t, err)
	g, c := model(t, "mlp-tiny"), cluster(t, "cpu:4")
	require.NoError(t, p.CheckFor(g, c))
	require.ErrorContains(t, p.CheckFor(model(t, "gpt-tiny"), c), "belongs to model mlp")
	slow := *c
	slow.IntraHostBandwidth /= 2
	require.ErrorContains(t, p.CheckFor(g, &slow), "intra_host_bandwidth 1e+08, not 5e+07")
	require.ErrorContains(t, p.CheckFor(g, cluster(t, "cpu:8")), "devices_per_host 4, not 8")
}

// badPlanFiles are the cases of TestReadPlanRefusesNonsense kept as files in testdata/plans,
// for the CLI's bad-input table (compile/run --plan, explain, render): a name and the file.
var badPlanFiles = map[string]string{
	"stages share a device":      "bad-shared-device.json",
	"overlapping stages":         "bad-overlap.json",
	"reversed stages":            "bad-reversed.json",
	"negative in_flight":         "bad-in-flight.json",
	"unknown schedule":           "bad-schedule.json",
	"negative prediction":        "bad-prediction.json",
	"layer out of range":         "bad-layer.json",
	"device outside the cluster": "bad-device.json",
}

// checkBadPlanFile writes the bad plan of case name to its testdata file under
// UPDATE_GOLDEN=1 and checks that the file, as committed, is still refused with want.
func checkBadPlanFile(t *testing.T, name string, bad []byte, want string) {
	file, ok := badPlanFiles[name]
	if !ok {
		return
	}
	path := filepath.Join("testdata", "plans", file)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		var out bytes.Buffer
		require.NoError(t, json.Indent(&out, bad, "", "  "))
		require.NoError(t, os.WriteFile(path, append(out.Bytes(), '\n'), 0o644))
	}
	_, err := ReadPlanFile(path)
	require.ErrorContains(t, err, path+": plan: ", "stale %s: run UPDATE_GOLDEN=1 go test -run TestReadPlanRefusesNonsense .", path)
	require.ErrorContains(t, err, want)
}

// testdata/plans/mlp-tiny-cpu4.json is the plan the bad ones are edited from, for the CLI
// table's good case; it must be what Compile makes today.
func TestGoodPlanFile(t *testing.T) {
	path := filepath.Join("testdata", "plans", "mlp-tiny-cpu4.json")
	good := twoStagePlan(t)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		require.NoError(t, os.WriteFile(path, good, 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(good), string(got), "stale %s: run UPDATE_GOLDEN=1 go test -run TestGoodPlanFile .", path)
}

// testdata/clusters/16m-hosts.json (2^24 hosts of one device) is past the stage search's
// limit: Compile refuses it before any sharding ILP, naming the limit.
func TestCompileRefusesAHugeSearch(t *testing.T) {
	c, err := mesh.LoadCluster(filepath.Join("testdata", "clusters", "16m-hosts.json"))
	require.NoError(t, err)
	p, err := Compile(context.Background(), model(t, "mlp-tiny"), c, Options{Microbatches: 1})
	require.Nil(t, p)
	require.ErrorContains(t, err, "more than its limit of 33554432 (dp.MaxSearchStates")
}
