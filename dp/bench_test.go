package dp

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkSolve times Solve (oracle table, recurrence and t_max search; the synthetic
// oracle itself is nearly free) over model depth and cluster size, 1F1B with 16
// micro-batches, memory not binding. The plain/ variants run Alpa's plain ascending loop;
// the recv/ variants price receives by the link (a Receiver), so the stages sit on the
// ring and the recurrence runs once per rotation.
func BenchmarkSolve(b *testing.B) {
	for _, layers := range []int{8, 16, 32} {
		for _, c := range []Cluster{{1, 8, 1e12}, {8, 8, 1e12}} {
			b.Run(fmt.Sprintf("recv/layers=%d/cluster=%dx%d", layers, c.Hosts, c.DevicesPerHost), func(b *testing.B) {
				benchSolveWith(b, layers, c, receiving{newPlausible(1, layers), 1, layers}, false)
			})
		}
	}
	for _, plain := range []bool{false, true} {
		for _, layers := range []int{8, 16, 32} {
			for _, c := range []Cluster{{1, 8, 1e12}, {8, 8, 1e12}} {
				name := fmt.Sprintf("layers=%d/cluster=%dx%d", layers, c.Hosts, c.DevicesPerHost)
				if plain {
					name = "plain/" + name
				}
				b.Run(name, func(b *testing.B) { benchSolve(b, layers, c, plain) })
			}
		}
	}
}

func benchSolve(b *testing.B, layers int, c Cluster, plain bool) {
	benchSolveWith(b, layers, c, newPlausible(1, layers), plain)
}

func benchSolveWith(b *testing.B, layers int, c Cluster, o Oracle, plain bool) {
	opts := Options{Microbatches: 16}
	var st Stats
	for b.Loop() {
		r, err := solve(context.Background(), layers, c, o, opts, plain)
		if err != nil {
			b.Fatal(err)
		}
		st = r.Stats
	}
	b.ReportMetric(float64(st.Evaluated), "passes")
	b.ReportMetric(float64(st.Candidates), "candidates")
}
