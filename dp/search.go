package dp

import (
	"context"
	"fmt"
	"math"
)

// search is Alpa's outer loop over t_max. T(t_max) = F(t_max) + (B−1)·t_max is an upper
// bound on the cost of the plan F found (its slowest stage is at most t_max), and equals it
// when t_max is that plan's slowest stage, so min over candidates of T is the optimum.
type search struct {
	ctx   context.Context
	t     *table
	rec   *recurrence
	opts  Options
	c     Cluster
	b     float64   // micro-batches
	cands []float64 // t_max candidates, ascending
	fAt   []float64 // F at each candidate; NaN until evaluated
	floor float64   // F with no t_max: min Σ t, a lower bound on every F
	best  float64   // least T found
	plan  []choice
	stats Stats
	plain bool // tests: Alpa's plain ascending loop, no step search and no floor stop
}

func newSearch(t *table, c Cluster, opts Options, placed bool) *search {
	rec := newRecurrence(t, c, placed)
	s := &search{t: t, rec: rec, opts: opts, c: c,
		b: float64(opts.Microbatches), cands: candidates(rec), best: math.Inf(1)}
	s.fAt = make([]float64, len(s.cands))
	for i := range s.fAt {
		s.fAt[i] = math.NaN()
	}
	s.stats.Candidates = len(s.cands)
	return s
}

// run finds the best plan or says why there is none.
func (s *search) run(ctx context.Context) error {
	s.ctx = ctx
	if err := ctx.Err(); err != nil {
		return err
	}
	s.floor = s.rec.run(s.t.bestT, math.Inf(1), false)
	s.stats.Evaluated++
	if math.IsInf(s.floor, 1) {
		return s.infeasible()
	}
	s.consider(s.rec.path())
	j, n := 0, len(s.cands)
	for j < n && !s.stop(j) {
		s.progress(j, n)
		fj, err := s.eval(j)
		if err != nil {
			return err
		}
		if s.plain {
			j++
			continue
		}
		if fj <= s.floor { // F cannot drop further; a larger t_max only adds bubble
			j++
			break
		}
		if j, err = s.next(j, fj); err != nil {
			return err
		}
	}
	s.finishStats(j)
	s.progress(n, n)
	return nil
}

// stop is the early stop: any plan whose slowest stage is at least c costs at least
// Σ t + (B−1)·c ≥ max(B·c, floor + (B−1)·c), and plans with a faster slowest stage were
// covered by smaller candidates. It is monotone in the candidate index.
func (s *search) stop(j int) bool {
	c := s.cands[j]
	if s.plain {
		return s.b*c >= s.best
	}
	return s.b*c >= s.best || s.floor+(s.b-1)*c >= s.best
}

// next returns the first candidate after j where F drops below fj, or the first index where
// the search stops, by galloping then bisecting over the monotone F.
func (s *search) next(j int, fj float64) (int, error) {
	lo, hi, n := j, -1, len(s.cands)
	for step := 1; hi < 0; step *= 2 {
		x := j + step
		if x >= n || s.stop(x) {
			hi = min(x, n)
			break
		}
		fx, err := s.eval(x)
		if err != nil {
			return 0, err
		}
		if fx < fj {
			hi = x
		} else {
			lo = x
		}
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if s.stop(mid) {
			hi = mid
			continue
		}
		fm, err := s.eval(mid)
		if err != nil {
			return 0, err
		}
		if fm < fj {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// eval runs the recurrence at candidate j once and keeps its plan if it is the best yet.
func (s *search) eval(j int) (float64, error) {
	if f := s.fAt[j]; !math.IsNaN(f) {
		return f, nil
	}
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	f := s.rec.run(s.t.bestT, s.cands[j], false)
	s.fAt[j] = f
	s.stats.Evaluated++
	if !math.IsInf(f, 1) {
		s.consider(s.rec.path())
	}
	return f, nil
}

// consider keeps plan p if its true cost, Σ t + (B−1)·max t + the first stage's step
// part, beats the best so far.
func (s *search) consider(p []choice) {
	sum, slowest, step := s.times(p)
	if x := sum + (s.b-1)*slowest + step; x < s.best {
		s.best, s.plan = x, p
	}
}

// times returns the sum and the max of plan p's micro-batch times (with their receives)
// and its first stage's step part.
func (s *search) times(p []choice) (sum, slowest, step float64) {
	for i, ch := range p {
		c := s.t.costs[s.t.cell(ch.start, ch.end, ch.sub)][ch.logical]
		t := c.Time + ch.recv
		sum, slowest = sum+t, max(slowest, t)
		if i == 0 {
			step = c.Step
		}
	}
	return sum, slowest, step
}

func (s *search) finishStats(stopAt int) {
	for j := 0; j < stopAt; j++ {
		if math.IsNaN(s.fAt[j]) {
			s.stats.Skipped++
		}
	}
	s.stats.Pruned = len(s.cands) - stopAt
}

func (s *search) progress(done, total int) {
	if s.opts.Progress != nil {
		s.opts.Progress(done, total)
	}
}

// infeasible explains why the unbounded recurrence found no plan.
func (s *search) infeasible() error {
	need := s.rec.run(s.t.minMem, math.Inf(1), true)
	if math.IsInf(need, 1) {
		return fmt.Errorf("%w for %d layers on %d×%d devices: the oracle has no sharding for the stages the constraints allow, or their submeshes cannot use exactly the cluster's %d devices",
			ErrNoPlan, s.t.layers, s.c.Hosts, s.c.DevicesPerHost, s.c.Devices())
	}
	return &MemoryError{Layers: s.t.layers, Cluster: s.c, Schedule: s.opts.Schedule,
		Microbatches: s.opts.Microbatches, Need: need}
}
