package ilp

import (
	"context"
	"encoding/gob"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replayWarm (flag -ilp-warm-pairs A:B,...) makes TestReplayWarm solve problem A of
// -ilp-corpus, then problem B cold and started from A's final basis, each without a limit
// and with -ilp-warm-iters, and print lp_solve's effort: how much a warm start saves on a
// re-solve of one ILP (B: A with other right-hand sides, the memory-lean solves of the
// search). Without both flags it is skipped.
var (
	replayWarm      = flag.String("ilp-warm-pairs", "", "TestReplayWarm: pairs A:B of -ilp-corpus file numbers, B re-solved from A's basis")
	replayWarmIters = flag.Int64("ilp-warm-iters", 3000, "TestReplayWarm: the iteration limit of the limited solves")
)

func TestReplayWarm(t *testing.T) {
	if *replayCorpus == "" || *replayWarm == "" {
		t.Skip("no -ilp-corpus and -ilp-warm-pairs")
	}
	load := func(n string) *Problem {
		k, err := strconv.Atoi(n)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(filepath.Join(*replayCorpus, fmt.Sprintf("%04d.gob", k)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var rec struct {
			P     *Problem
			Limit time.Duration
		}
		if err := gob.NewDecoder(f).Decode(&rec); err != nil {
			t.Fatal(err)
		}
		return rec.P
	}
	run := func(what string, p *Problem, opts Options) *Solution {
		var st Stats
		defer Trace(func(_ *Problem, s Stats) { st = s })()
		sol, _, err := solve(context.Background(), p, opts)
		obj, status := "-", "ok"
		if sol != nil {
			obj = fmt.Sprintf("%.12g", sol.Objective)
		}
		if err != nil {
			status = err.Error()
		}
		fmt.Printf("%s\t%d\t%d\t%s\t%.3f\t%d\t%d\t%s\n", what, st.Vars, st.Rows, obj, st.CPU.Seconds(), st.Iterations, st.Nodes, status)
		return sol
	}
	fmt.Println("solve\tvars\trows\tobjective\tcpu s\titerations\tnodes\tstatus")
	for _, pair := range strings.Split(*replayWarm, ",") {
		a, b, _ := strings.Cut(pair, ":")
		pa, pb := load(a), load(b)
		first := run(a, pa, Options{})
		if first == nil || first.Basis == nil {
			t.Errorf("%s: no basis to start from", a)
			continue
		}
		run(a+" again, warm", pa, Options{Start: first.Basis})
		for _, it := range []int64{*replayWarmIters, 0} {
			run(fmt.Sprintf("%s cold, limit %d", b, it), pb, Options{Iterations: it})
			run(fmt.Sprintf("%s warm, limit %d", b, it), pb, Options{Iterations: it, Start: first.Basis})
		}
	}
}
