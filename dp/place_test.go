package dp

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/autopar/autopar/mesh"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stagesOf makes stages of the given device counts (each a power of two below a host, or a
// whole number of hosts) on hosts of d devices.
func stagesOf(d int, sizes ...int) []Stage {
	out := make([]Stage, len(sizes))
	for i, n := range sizes {
		if n < d {
			out[i].Submesh = mesh.Submesh{Hosts: 1, Devices: n}
		} else {
			out[i].Submesh = mesh.Submesh{Hosts: n / d, Devices: d}
		}
	}
	return out
}

// checkPlaced fails unless the stages' devices are valid: each stage has its submesh's
// count of consecutive devices from a start aligned to its size, none smaller than a host
// straddles two, and together they cover the cluster once.
func checkPlaced(t *testing.T, c Cluster, stages []Stage) {
	t.Helper()
	seen := make([]bool, c.Devices())
	for i, s := range stages {
		n := s.Submesh.NumDevices()
		require.Len(t, s.Devices, n, "stage %d", i)
		assert.Zero(t, s.Devices[0]%min(n, c.DevicesPerHost), "stage %d of %d devices starts at %d", i, n, s.Devices[0])
		for j, d := range s.Devices {
			require.Equal(t, s.Devices[0]+j, d, "stage %d: devices %v", i, s.Devices)
			require.False(t, seen[d], "device %d twice", d)
			seen[d] = true
		}
		if n < c.DevicesPerHost {
			assert.Equal(t, s.Devices[0]/c.DevicesPerHost, s.Devices[n-1]/c.DevicesPerHost, "stage %d straddles hosts: %v", i, s.Devices)
		}
	}
	for d, ok := range seen {
		assert.True(t, ok, "device %d unused", d)
	}
}

// placedWeight is Σ weight over the pairs of stages below a host that share a host.
func placedWeight(c Cluster, stages []Stage, w func(a, b int) float64) float64 {
	s := 0.0
	for a := range stages {
		for b := a + 1; b < len(stages); b++ {
			if stages[a].Submesh.NumDevices() < c.DevicesPerHost && stages[b].Submesh.NumDevices() < c.DevicesPerHost &&
				stages[a].Devices[0]/c.DevicesPerHost == stages[b].Devices[0]/c.DevicesPerHost {
				s += w(a, b)
			}
		}
	}
	return s
}

// bestWeight is the greatest placedWeight over every assignment of the stages below a host
// to hosts that fits (brute force).
func bestWeight(c Cluster, stages []Stage, w func(a, b int) float64) float64 {
	var small []int
	hostDevs := 0
	for i, s := range stages {
		if n := s.Submesh.NumDevices(); n < c.DevicesPerHost {
			small = append(small, i)
			hostDevs += n
		}
	}
	hosts := hostDevs / c.DevicesPerHost
	at, room := make([]int, len(small)), make([]int, hosts)
	for h := range room {
		room[h] = c.DevicesPerHost
	}
	best := -1.0
	var rec func(k int)
	rec = func(k int) {
		if k == len(small) {
			s := 0.0
			for x := range small {
				for y := x + 1; y < len(small); y++ {
					if at[x] == at[y] {
						s += w(small[x], small[y])
					}
				}
			}
			best = max(best, s)
			return
		}
		n := stages[small[k]].Submesh.NumDevices()
		for h := range room {
			if room[h] >= n {
				room[h] -= n
				at[k] = h
				rec(k + 1)
				room[h] += n
			}
		}
	}
	rec(0)
	return best
}

func neighbours(a, b int) float64 {
	if a-b == 1 || b-a == 1 {
		return 1
	}
	return 0
}

// TestPlaceKeepsNeighbours: on 2 hosts of 4, stages of 2, 1, 1, 2, 2 devices. Largest first
// puts stages 0 and 3 on host 0 and 4, 1, 2 on host 1 (one neighbouring pair together);
// Place puts 0, 1, 2 on host 0 and 3, 4 on host 1 (all three).
func TestPlaceKeepsNeighbours(t *testing.T) {
	c := Cluster{Hosts: 2, DevicesPerHost: 4}
	st := stagesOf(4, 2, 1, 1, 2, 2)
	Place(c, st)
	checkPlaced(t, c, st)
	var got [][]int
	for _, s := range st {
		got = append(got, s.Devices)
	}
	assert.Equal(t, [][]int{{0, 1}, {2}, {3}, {4, 5}, {6, 7}}, got)
	assert.Equal(t, 3.0, placedWeight(c, st, neighbours))
	// whole-host stages first, then the packed hosts; an unchanged packing keeps the old layout
	st = stagesOf(4, 2, 8, 2)
	c = Cluster{Hosts: 3, DevicesPerHost: 4}
	Place(c, st)
	checkPlaced(t, c, st)
	assert.Equal(t, []int{8, 9}, st[0].Devices)
	assert.Equal(t, 0, st[1].Devices[0])
	assert.Equal(t, []int{10, 11}, st[2].Devices)
}

// TestPlaceValidAndBest: random stage sizes on clusters of 1–4 hosts of 2–8 devices, with
// neighbour weights and random ones: the placement is valid and its weight is the brute
// force's best.
func TestPlaceValidAndBest(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 7))
	for trial := range 300 {
		d := []int{2, 4, 8}[rng.IntN(3)]
		c := Cluster{Hosts: 1 + rng.IntN(4), DevicesPerHost: d}
		var sizes []int
		for left := c.Devices(); left > 0; {
			var n int
			if left%d == 0 && rng.IntN(4) == 0 {
				n = d * (1 + rng.IntN(left/d))
			} else {
				n = 1 << rng.IntN(bitsOf(d))
				for left%d != 0 && n > left%d {
					n /= 2
				}
			}
			sizes = append(sizes, n)
			left -= n
		}
		if small := len(sizes) - countAtLeast(sizes, d); small > 7 {
			continue // the brute force's reach
		}
		rng.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
		ws := make([]float64, len(sizes)*len(sizes))
		for i := range ws {
			ws[i] = float64(rng.IntN(10))
		}
		random := func(a, b int) float64 { return ws[min(a, b)*len(sizes)+max(a, b)] }
		for _, w := range []func(a, b int) float64{neighbours, random} {
			st := stagesOf(d, sizes...)
			PlaceBy(c, st, w)
			name := fmt.Sprintf("trial %d: %dx%d %v", trial, c.Hosts, d, sizes)
			checkPlaced(t, c, st)
			assert.Equal(t, bestWeight(c, st, w), placedWeight(c, st, w), name)
		}
	}
}

func bitsOf(d int) int {
	b := 0
	for ; d > 1; d /= 2 {
		b++
	}
	return b
}

func countAtLeast(sizes []int, d int) int {
	k := 0
	for _, n := range sizes {
		if n >= d {
			k++
		}
	}
	return k
}
