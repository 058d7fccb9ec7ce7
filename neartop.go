package autopar

import (
	"math"

	"github.com/autopar/autopar/dp"
)

// A count that cannot better the plan known (issue 13, round twelve, branch cpu).
//
// exactly's rounds (compile.go, exactRounds) end when the count's incumbent is within
// refineTolerance of the count's optimistic bound, opt: the fast search's proof, on the
// lower-bound premise (oracle.lower), that no plan of the count is more than that faster
// than the plan it returns. The compile returns the fastest plan over the counts, so what
// a count's rounds can still change is the compile's plan only, and only where the count
// has a plan faster than top, the fastest plan known (searchAll: a plan found, or one a
// count holds, which the compile returns unless a faster one comes). Where top is within
// topTolerance of opt, the same proof bounds what the rounds can gain the compile: no plan
// of the count is more than topTolerance faster than top. nearTop then ends the rounds as
// within does, with the count's own incumbent, which loses to top or is it.
//
// topTolerance is far under refineTolerance on purpose: a count's plan can sit at its
// bound (Wide-ResNet-500M/2's count 32 ends at 51.589287 s, its bound, while count 48's
// plan of 51.690828 s, 0.197 % over, was top), and with refineTolerance nearTop gave
// that row the slower plan. A count whose bound is within 0.01 % under top gains the
// compile at most that, the error this rule allows. MoE-27B/32: count 64's bound
// 13.921463 s against count 32's plan 13.921921 s (0.0033 %), and its next round ran the
// range ILP of [5,8) on 2×4 to lp_solve's 40,000-iteration limit (27,448 variables, 19.2
// CPU s) for a plan of 14.11 s; the compile took 36.7–38.4 CPU s, 16.9–17.4 with nearTop,
// the same plan (docs/DECISIONS.md, "Round twelve, cpu"). A count whose bound is above top
// already (on the premise it cannot win; searchAll's loses skips only past boundMargin)
// ends too.
const topTolerance = 1e-4

// nearTop reports whether top, the fastest plan known, is within topTolerance of opt,
// the count's optimistic plan (see above). Fast search only: the exhaustive search solves
// every range and has no rounds.
func (o *oracle) nearTop(opt *dp.Result) bool {
	if !o.fast || opt == nil || o.top <= 0 || math.IsInf(o.top, 1) {
		return false
	}
	return o.top <= opt.Time*(1+topTolerance)
}
