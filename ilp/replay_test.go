package ilp

import (
	"context"
	"encoding/gob"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The replay harness: `go test ./ilp -run TestReplay -ilp-corpus DIR [-ilp-tune k=v,...]`
// solves every problem of a corpus written by the root package's -ilp-dump and prints one
// line per problem (objective, CPU, iterations, nodes), to compare solver settings on real
// sharding ILPs. Without -ilp-corpus it is skipped.
var (
	replayCorpus  = flag.String("ilp-corpus", "", "directory of gob-encoded ILPs to replay (TestReplay)")
	replayMemo    = flag.Bool("ilp-memo", false, "TestReplay: solve through Solve's memo")
	replayLean    = flag.Int64("ilp-lean", 0, "TestReplay: solve problems recorded with a limit under 10 s with this iteration limit and 30 s")
	replayIters   = flag.Int64("ilp-iters", 0, "TestReplay: stop every solve after this many simplex iterations (ilp.Options.Iterations)")
	replayNoLimit = flag.Bool("ilp-nolimit", false, "TestReplay: ignore the recorded time limits")
	replayInc     = flag.Bool("ilp-incumbent", false, "TestReplay: give each problem its recorded incumbent (Options.Incumbent), if any; problems without one are skipped")
	replayTune    = flag.String("ilp-tune", "", "lp_solve settings for TestReplay: presolve=N,scaling=N,bbrule=N,floor=N,improve=N,depth=N")
)

func TestReplay(t *testing.T) {
	if *replayCorpus == "" {
		t.Skip("no -ilp-corpus")
	}
	tu := defaultTuning
	for _, kv := range strings.Split(*replayTune, ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		n := int(x)
		switch k {
		case "presolve":
			tu.presolve = n
		case "scaling":
			tu.scaling = n
		case "bbrule":
			tu.bbRule = n
		case "floor":
			tu.floor = n
		case "improve":
			tu.improve = n
		case "depth":
			tu.depth = n
		case "simplex":
			tu.simplex = n
		case "rowscale":
			tu.scaleRows = n != 0
		case "pivoting":
			tu.pivoting = n
		case "firstrule":
			tu.firstRule = n
		case "verbose":
			tu.verbose = n
		case "crash":
			tu.crash = n
		case "epspivot":
			tu.epsPivot = x
		case "epsel":
			tu.epsEl = x
		case "gapabs":
			tu.gapAbs = x
		case "gaprel":
			tu.gapRel = x
		default:
			t.Fatalf("unknown setting %q", k)
		}
	}
	old := defaultTuning
	defaultTuning = tu
	defer func() { defaultTuning = old }()
	files, _ := filepath.Glob(filepath.Join(*replayCorpus, "*.gob"))
	sort.Strings(files)
	var cpu time.Duration
	var iters, nodes int64
	for _, f := range files {
		var rec struct {
			P         *Problem
			Limit     time.Duration
			Incumbent []float64
		}
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		err = gob.NewDecoder(r).Decode(&rec)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if *replayInc && rec.Incumbent == nil {
			continue
		}
		var st Stats
		restore := Trace(func(_ *Problem, s Stats) { st = s })
		if *replayNoLimit {
			rec.Limit = 0
		}
		opts := Options{TimeLimit: rec.Limit, Iterations: *replayIters}
		if *replayLean > 0 && rec.Limit > 0 && rec.Limit < 10*time.Second {
			// a lean solve of the oracle: effort-limited now, with its full time limit
			opts = Options{TimeLimit: 30 * time.Second, Iterations: *replayLean}
		}
		if *replayInc {
			opts.Incumbent = rec.Incumbent
		}
		var sol *Solution
		if *replayMemo {
			sol, err = Solve(context.Background(), rec.P, opts)
		} else {
			sol, _, err = solve(context.Background(), rec.P, opts)
		}
		restore()
		obj := "-"
		if sol != nil {
			obj = fmt.Sprintf("%.9g", sol.Objective)
			if ev := Evaluate(rec.P, sol.Values); !ev.Feasible() {
				obj += fmt.Sprintf("(VIOLATES %d)", len(ev.Rows)+len(ev.Bounds)+len(ev.Integrality))
			}
		}
		status := "ok"
		if err != nil {
			status = err.Error()
		}
		if rec.Incumbent != nil {
			obj += fmt.Sprintf(" (incumbent %.9g)", Evaluate(rec.P, rec.Incumbent).Objective)
		}
		fmt.Printf("%s\t%d\t%d\t%s\t%.3f\t%d\t%d\t%s\n", filepath.Base(f), st.Vars, st.Rows, obj, st.CPU.Seconds(), st.Iterations, st.Nodes, status)
		cpu += st.CPU
		iters += st.Iterations
		nodes += st.Nodes
	}
	fmt.Printf("TOTAL\t%d problems\tcpu %.2f s\titers %d\tnodes %d\n", len(files), cpu.Seconds(), iters, nodes)
}

// TestReplayWriteLP prints the first problem of -ilp-corpus in LP format.
func TestReplayWriteLP(t *testing.T) {
	if *replayCorpus == "" {
		t.Skip("no -ilp-corpus")
	}
	files, _ := filepath.Glob(filepath.Join(*replayCorpus, "*.gob"))
	var rec struct {
		P     *Problem
		Limit time.Duration
	}
	r, _ := os.Open(files[0])
	defer r.Close()
	if err := gob.NewDecoder(r).Decode(&rec); err != nil {
		t.Fatal(err)
	}
	rec.P.WriteLP(os.Stdout)
}
