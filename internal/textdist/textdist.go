// Package textdist measures how far apart two names are, for the "did you mean" notes of
// the parser and explain: one Levenshtein distance, with an optional bound that stops early.
package textdist

import (
	"math"
	"sort"
)

// Distance is the Levenshtein distance of a and b over bytes, or bound if it is at least
// bound (bound ≤ 0: no bound).
func Distance(a, b string, bound int) int {
	if bound <= 0 {
		bound = math.MaxInt
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= bound {
			return bound
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], bound)
}

// Closest returns up to n of names nearest to name, nearest first, in the given order on
// ties.
func Closest(name string, names []string, n int) []string {
	type cand struct {
		s string
		d int
	}
	cs := make([]cand, len(names))
	for i, s := range names {
		cs[i] = cand{s, Distance(name, s, 0)}
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < n; i++ {
		out = append(out, cs[i].s)
	}
	return out
}
