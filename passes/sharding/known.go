package sharding

import (
	"slices"

	"github.com/autopar/autopar/ilp"
)

// Known plans (Options.Known). A range ILP that lp_solve stops at its iteration limit
// answers with its branch and bound's best point, which depends on the objective's
// details and on lp_solve's path, not on what the search already knows of the range: the
// plan its layers compose, or its solve restricted to those layers' strategies
// (restrict.go at the root). GPT-2.6B/8's [3,8) on 2×2 is such an ILP; when objcost
// changed its objective, the point at the limit moved and the compile's plan got 2.1 %
// slower (docs/DECISIONS.md, "Round eleven, lead"). A known plan that this ILP holds and
// that fits the budget is lp_solve's incumbent (ilp.Options.Incumbent, its cutoff), so
// the answer is never worse than it in the ILP's objective, which is the plan's price
// (objcost), whether lp_solve stops at its limit or not.

// KnownPlan names a plan by its strategies: Strategy.Name per value of the graph, by
// ValueID ("" leaves a value unnamed, and the plan unheld). Names, unlike indices, do not
// depend on the candidate lists of another graph or other options (a layer's own solve).
type KnownPlan []string

// PlanOf returns r's plan by its strategies' names.
func PlanOf(r *Result) KnownPlan {
	if r == nil {
		return nil
	}
	out := make(KnownPlan, len(r.Strategies))
	for i := range r.Strategies {
		out[i] = r.Strategies[i].Name
	}
	return out
}

// knownChoice is the choice of group strategies that spells plan out, nil when the ILP
// does not hold it: a value without a candidate of its name, or a group without a strategy
// that picks its members' named candidates (merging, the einsum cut or dominance pruning
// left that combination out). A group tied to another (layers.go) shares its variables,
// so it takes its representative's strategy whatever plan names for it: plans composed of
// layers solved one by one may choose differently in two layers the range ILP ties, and
// the plan held is then the one where every tied layer runs as the first does.
func (p *planner) knownChoice(plan KnownPlan) []int {
	if len(plan) != len(p.g.Values) {
		return nil
	}
	choice := make([]int, len(p.groups))
	want := []int32{}
	for gi, gr := range p.groups {
		if p.rep[gi] != gi {
			continue
		}
		want = want[:0]
		for _, v := range gr.members {
			k := p.candidateNamed(v, plan[v])
			if k < 0 {
				return nil
			}
			want = append(want, k)
		}
		choice[gi] = -1
		for k, gs := range gr.strats {
			if slices.Equal(gs.pick, want) {
				choice[gi] = k
				break
			}
		}
		if choice[gi] < 0 {
			return nil
		}
	}
	for gi := range p.groups {
		choice[gi] = choice[p.rep[gi]]
	}
	return choice
}

// knownIncumbent returns the best of Options.Known, by its objective in the ILP as built so
// far (no memory rows yet), that the ILP holds and that fits budget (0: none) at every
// point of the step; nil when none does.
func (p *planner) knownIncumbent(budget float64) []int {
	var best []int
	bestObj := 0.0
	for _, plan := range p.opts.Known {
		choice := p.knownChoice(plan)
		if choice == nil {
			continue
		}
		if _, peak := p.peakOf(choice); budget > 0 && peak > budget {
			continue
		}
		ev := ilp.Evaluate(p.prob, p.assignment(choice))
		if !ev.Feasible() {
			continue
		}
		if best == nil || ev.Objective < bestObj {
			best, bestObj = choice, ev.Objective
		}
	}
	return best
}

// betterIncumbent returns whichever of a and b has the lower objective in the ILP as it
// stands (a on a tie; nil where neither is given).
func (p *planner) betterIncumbent(a, b []int) []int {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	ea := ilp.Evaluate(p.prob, p.assignment(a))
	eb := ilp.Evaluate(p.prob, p.assignment(b))
	if eb.Objective < ea.Objective {
		return b
	}
	return a
}
