package mpi_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar"
	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/frontend"
	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
	"github.com/autopar/autopar/runtime/mpi"
)

// The proof that the MPI transport is right: the programs of compiled plans, run by mpirun
// with one rank per device, give every store (loss, gradients, updated params and state)
// bit for bit and every counter (peak bytes, bytes sent and received, instructions) equal
// to the in-process runtime, for two steps. The test binary is its own worker: under
// mpirun (workerEnv set) TestMain runs the cases of a directory instead of the tests.

const (
	workerEnv = "AUTOPAR_MPI_WORKER" // the directory of cases a worker runs
	faultEnv  = "AUTOPAR_MPI_FAULT"  // "stop" or "kill": rank 1 stops or dies in its first step
	steps     = 2
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(workerEnv); dir != "" {
		os.Exit(worker(dir))
	}
	quietRanks()
	code := m.Run()
	if underMPIRun() { // the benchmarks' ranks
		if w, err := mpi.Init(); err == nil {
			_ = w.Finalize()
		}
	}
	os.Exit(code)
}

// mpiCase is one plan to run on n ranks.
type mpiCase struct {
	name, model string
	n           int
	opts        autopar.Options
	batch       int // rebatch the model to this (0: keep its own)
}

// cases are the plans of the proof: data parallel, tensor parallel (the ILP's choice under
// tp=N: Megatron-like splits with all-reduces and all-to-alls on GPT and MoE; it replicates
// the tiny MLP), 2- and 4-stage GPipe and 1F1B pipelines, mixed tp×pp, on MLP, GPT, MoE and
// Wide-ResNet, on 2 and 4 ranks; together they run every collective and send/recv.
var cases = []mpiCase{
	{"mlp-dp", "mlp-tiny", 2, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 1, PP: 1, DP: 2}}, 0},
	{"mlp-tp2-replicated", "mlp-tiny", 2, autopar.Options{Microbatches: 2, Manual: &autopar.Manual{TP: 2, PP: 1, DP: 1}}, 0},
	{"mlp-gpipe-2", "mlp-tiny", 2, autopar.Options{Microbatches: 2, Schedule: "gpipe", Manual: &autopar.Manual{TP: 1, PP: 2, DP: 1}}, 0},
	{"gpt-megatron", "gpt-tiny", 2, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 2, PP: 1, DP: 1}}, 0},
	{"gpt-1f1b-2", "gpt-tiny", 2, autopar.Options{Microbatches: 2, Layers: 2, Manual: &autopar.Manual{TP: 1, PP: 2, DP: 1}}, 0},
	{"moe-tp2", "moe-tiny", 2, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 2, PP: 1, DP: 1}}, 4},
	{"wresnet-dp", "wresnet-tiny", 2, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 1, PP: 1, DP: 2}}, 2},
	{"mlp-1f1b-4", "mlp-tiny", 4, autopar.Options{Microbatches: 4, Manual: &autopar.Manual{TP: 1, PP: 4, DP: 1}}, 0},
	{"mlp-gpipe-4-adam", "mlp-tiny", 4, autopar.Options{Microbatches: 2, Schedule: "gpipe", Optimizer: passes.Optimizer{Kind: "adam", LR: 0.01}, Manual: &autopar.Manual{TP: 2, PP: 2, DP: 1}}, 0},
	{"gpt-tp2-pp2", "gpt-tiny", 4, autopar.Options{Microbatches: 2, Layers: 2, Manual: &autopar.Manual{TP: 2, PP: 2, DP: 1}}, 0},
	{"moe-tp4", "moe-tiny", 4, autopar.Options{Microbatches: 1, Manual: &autopar.Manual{TP: 4, PP: 1, DP: 1}}, 4},
}

// stepResult is what a step gives, as rank 0 writes it back.
type stepResult struct {
	Stores  map[string]*kernels.Tensor
	Devices []runtime.DeviceStats
}

// caseFiles is what the worker reads from a case directory.
type caseFiles struct {
	Feeds   runtime.Data
	Updates []string // stores that feed the next step
}

func requireMPI(t *testing.T) string {
	t.Helper()
	if !mpi.Available() {
		t.Skip("built without MPI: install Open MPI (make deps) and test with -tags mpi (make test does)")
	}
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found: install openmpi-bin (make deps)")
	}
	return path
}

// mpirun runs the test binary as n workers over dir and returns their output.
func mpirun(t *testing.T, bin string, n int, dir string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-np", fmt.Sprint(n), "--oversubscribe", "--bind-to", "none", os.Args[0])
	cmd.Env = append(os.Environ(), workerEnv+"="+dir, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_btl_vader_single_copy_mechanism=none")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestMPIEqualsInProcess(t *testing.T) {
	bin := requireMPI(t)
	start := time.Now()
	root := t.TempDir()
	want := map[string][]stepResult{}
	predicted := map[string][]codegen.DeviceCounters{}
	var kinds [program.NumKinds]int
	for _, c := range cases {
		dir := filepath.Join(root, fmt.Sprintf("np%d", c.n), c.name)
		t0 := time.Now()
		progs, files := prepare(t, c, dir)
		var mine [program.NumKinds]int
		for _, p := range progs {
			for _, in := range p.Instrs {
				kinds[in.Kind]++
				mine[in.Kind]++
			}
		}
		t.Logf("%s: %v; all_reduce %d, all_gather %d, reduce_scatter %d, all_to_all %d, send %d", c.name, time.Since(t0).Round(time.Millisecond),
			mine[program.AllReduce], mine[program.AllGather], mine[program.ReduceScatter], mine[program.AllToAll], mine[program.Send])
		want[c.name] = inProcess(t, progs, files)
		predicted[c.name] = codegen.Predict(nil, progs)
	}
	t.Logf("compiled and ran in-process in %v", time.Since(start).Round(time.Millisecond))
	for _, n := range []int{2, 4} {
		t0 := time.Now()
		out, err := mpirun(t, bin, n, filepath.Join(root, fmt.Sprintf("np%d", n)))
		require.NoError(t, err, "mpirun -np %d:\n%s", n, out)
		t.Logf("mpirun -np %d: %v", n, time.Since(t0).Round(time.Millisecond))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []stepResult
			readGob(t, filepath.Join(root, fmt.Sprintf("np%d", c.n), c.name, "result.gob"), &got)
			require.Len(t, got, steps)
			for s := range steps {
				sameResult(t, fmt.Sprintf("step %d", s+1), want[c.name][s], got[s])
				for i, p := range predicted[c.name] {
					d := got[s].Devices[i]
					require.Equal(t, p, codegen.DeviceCounters{Device: d.Device, PeakBytes: d.PeakBytes, BytesSent: d.BytesSent, BytesReceived: d.BytesReceived},
						"step %d: device %d's counters over MPI against codegen's prediction", s+1, d.Device)
				}
			}
		})
	}
	for _, k := range []program.Kind{program.AllReduce, program.AllGather, program.Send, program.Recv} {
		require.Positive(t, kinds[k], "no %s in any plan: the test proves little", k)
	}
	t.Logf("instructions run over MPI, by kind: all_reduce %d, all_gather %d, reduce_scatter %d, all_to_all %d, send %d",
		kinds[program.AllReduce], kinds[program.AllGather], kinds[program.ReduceScatter], kinds[program.AllToAll], kinds[program.Send])
}

// prepare compiles a case and writes its programs and feeds into dir.
func prepare(t *testing.T, c mpiCase, dir string) ([]*program.Program, caseFiles) {
	t.Helper()
	g, err := frontend.ParseFile("../../testdata/models/" + c.model + ".ir")
	require.NoError(t, err)
	if c.batch != 0 {
		g, err = passes.Rebatch(g, c.batch)
		require.NoError(t, err)
	}
	cl, err := mesh.ParseCluster(fmt.Sprintf("cpu:%d", c.n))
	require.NoError(t, err)
	p, err := autopar.Compile(context.Background(), g, cl, c.opts)
	require.NoError(t, err, c.name)
	progs, err := p.Programs()
	require.NoError(t, err)
	full, err := passes.TrainingStep(p.Forward(), p.Optimizer.Optimizer())
	require.NoError(t, err)
	files := caseFiles{Feeds: runtime.Data(interp.InitParams(full, 1))}
	data, err := interp.GenerateInputs(full, 2)
	require.NoError(t, err)
	for k, v := range data {
		files.Feeds[k] = v
	}
	for _, u := range full.Updates {
		files.Updates = append(files.Updates, full.Value(u.Target).Name)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for _, pr := range progs {
		b, err := pr.MarshalJSON()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("device%d.json", pr.Device)), b, 0o644))
	}
	writeGob(t, filepath.Join(dir, "case.gob"), files)
	return progs, files
}

// inProcess runs the steps on runtime.Run, the reference.
func inProcess(t *testing.T, progs []*program.Program, files caseFiles) []stepResult {
	t.Helper()
	feeds := runtime.Data{}
	for k, v := range files.Feeds {
		feeds[k] = v
	}
	var out []stepResult
	for range steps {
		res, err := runtime.Run(context.Background(), progs, feeds, runtime.Options{})
		require.NoError(t, err)
		out = append(out, stepResult{res.Stores, res.Devices})
		for _, name := range files.Updates {
			feeds[name] = res.Stores[name]
		}
	}
	return out
}

func sameResult(t *testing.T, what string, want, got stepResult) {
	t.Helper()
	require.Equal(t, len(want.Stores), len(got.Stores), "%s: stores", what)
	for name, w := range want.Stores {
		g, ok := got.Stores[name]
		require.True(t, ok, "%s: %s not stored", what, name)
		require.True(t, w.Type.Equal(g.Type), "%s: %s is %s, want %s", what, name, g.Type, w.Type)
		for i := range w.Len() {
			a, b := w.At(i), g.At(i)
			if math.Float64bits(a) != math.Float64bits(b) {
				t.Fatalf("%s: %s[%d] = %v over MPI, %v in-process: expected bit-identical", what, name, i, b, a)
			}
		}
	}
	require.Len(t, got.Devices, len(want.Devices))
	for i, w := range want.Devices {
		g := got.Devices[i]
		require.Equal(t, w.Device, g.Device)
		require.Equal(t, w.PeakBytes, g.PeakBytes, "%s: device %d peak bytes", what, w.Device)
		require.Equal(t, w.BytesSent, g.BytesSent, "%s: device %d bytes sent", what, w.Device)
		require.Equal(t, w.BytesReceived, g.BytesReceived, "%s: device %d bytes received", what, w.Device)
		require.Equal(t, w.Count, g.Count, "%s: device %d instruction counts", what, w.Device)
	}
}

func writeGob(t *testing.T, path string, v any) {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, gob.NewEncoder(&b).Encode(v))
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

func readGob(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, gob.NewDecoder(bytes.NewReader(b)).Decode(v))
}

// worker runs every case under dir on this rank; rank 0 writes each case's results. An
// error is printed with the rank and ends the job (MPI_Abort).
func worker(dir string) int {
	w, err := mpi.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	run := runCases
	if os.Getenv(trainerEnv) != "" {
		run = trainerWorker
	}
	if err := run(w, dir); err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", w.Rank(), err)
		w.Abort(1)
	}
	if err := w.Finalize(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func runCases(w *mpi.World, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := runCase(w, filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
	}
	return nil
}

func runCase(w *mpi.World, dir string) error {
	ctx := context.Background()
	var progs []*program.Program
	for d := range w.Size() {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("device%d.json", d)))
		if err != nil {
			return err
		}
		p, err := program.UnmarshalProgram(b)
		if err != nil {
			return err
		}
		progs = append(progs, p)
	}
	var files caseFiles
	b, err := os.ReadFile(filepath.Join(dir, "case.gob"))
	if err != nil {
		return err
	}
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&files); err != nil {
		return err
	}
	timeout := time.Minute
	fault := os.Getenv(faultEnv)
	if fault == "mismatch" && w.Rank() == 1 {
		progs[0].Buffers[0].Name += ".edited" // as if rank 1 read another plan
	}
	if fault != "" {
		timeout = 2 * time.Second
	}
	s, err := w.NewSession(ctx, progs, timeout)
	if err != nil {
		return err
	}
	var out []stepResult
	for step := range steps {
		if fault != "" && w.Rank() == 1 && step == 1 {
			s.Wrap = func(t runtime.Transport) runtime.Transport { return faulty{t, fault} }
		}
		res, err := s.Run(ctx, files.Feeds, runtime.Options{Timeout: timeout})
		if err != nil {
			return err
		}
		out = append(out, stepResult{res.Stores, res.Devices})
		for _, name := range files.Updates {
			files.Feeds[name] = res.Stores[name]
		}
	}
	if w.Rank() != 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(out); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "result.gob"), buf.Bytes(), 0o644)
}

// faulty makes rank 1 fail at its first all-reduce as a real rank would: it stops
// answering (a hung process) or dies (killed by the kernel, a lost host).
type faulty struct {
	runtime.Transport
	kind string
}

func (f faulty) AllReduce(ctx context.Context, self runtime.DeviceID, group []runtime.DeviceID, x *kernels.Tensor) (*kernels.Tensor, runtime.Traffic, error) {
	switch f.kind {
	case "stop":
		time.Sleep(time.Hour) // the others time out and abort the job, which kills this one
	case "kill":
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill()
	}
	return f.Transport.AllReduce(ctx, self, group, x)
}

// TestMPIFaults: a rank that stops answering makes the others time out, naming the
// instruction and the peer, and abort the job; a rank that dies ends the job with mpirun
// naming the lost rank; a rank started with other programs is refused before the first
// step. Each time mpirun exits non-zero well within the timeout.
func TestMPIFaults(t *testing.T) {
	bin := requireMPI(t)
	root := t.TempDir()
	c := cases[0] // data parallel on 2 ranks: one all-reduce per parameter
	prepare(t, c, filepath.Join(root, c.name))
	for _, fault := range []struct{ kind, want string }{
		{"stop", "waiting for device 1"},
		{"kill", "rank 1"},
		{"mismatch", "rank 1 started with programs"},
	} {
		t.Run(fault.kind, func(t *testing.T) {
			start := time.Now()
			out, err := mpirun(t, bin, 2, root, faultEnv+"="+fault.kind)
			require.Error(t, err, "mpirun should fail:\n%s", out)
			require.Contains(t, out, fault.want)
			require.Less(t, time.Since(start), 30*time.Second)
			if fault.kind == "stop" {
				require.True(t, strings.Contains(out, "instr") && strings.Contains(out, "device 0"), "the error names the instruction:\n%s", out)
			}
			t.Logf("%s: mpirun failed after %v:\n%s", fault.kind, time.Since(start).Round(time.Millisecond), out)
		})
	}
}
