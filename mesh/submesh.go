package mesh

import (
	"fmt"
	"sort"
)

// DeviceID numbers a device of a cluster, host-major: device d of host h is
// h*DevicesPerHost + d. Slices indexed by DeviceID are the norm.
type DeviceID int32

// A Submesh is a physical block of Hosts hosts × Devices devices per host,
// its devices listed host-major. Alpa's stage DP assigns each pipeline stage
// one submesh.
type Submesh struct {
	Hosts   int `json:"hosts"`
	Devices int `json:"devices"` // per host
}

// NumDevices returns Hosts*Devices.
func (s Submesh) NumDevices() int { return s.Hosts * s.Devices }

// String writes the submesh as "HOSTSxDEVICES", e.g. "2x8".
func (s Submesh) String() string { return fmt.Sprintf("%dx%d", s.Hosts, s.Devices) }

// SubmeshShapes lists the submesh shapes the stage DP may choose, following
// Alpa §5.1: (1, 2^k) for 2^k ≤ DevicesPerHost, and (n, M) for n = 1..Hosts
// with M = DevicesPerHost. Such shapes can always tile the cluster. The list
// has no duplicates and is sorted by number of devices, then hosts.
func SubmeshShapes(c *Cluster) []Submesh {
	seen := map[Submesh]bool{}
	var out []Submesh
	add := func(s Submesh) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for d := 1; d <= c.DevicesPerHost; d *= 2 {
		add(Submesh{Hosts: 1, Devices: d})
	}
	for n := 1; n <= c.Hosts; n++ {
		add(Submesh{Hosts: n, Devices: c.DevicesPerHost})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.NumDevices() != b.NumDevices() {
			return a.NumDevices() < b.NumDevices()
		}
		return a.Hosts < b.Hosts
	})
	return out
}

// LogicalShapes lists every logical mesh shape (n0, n1) with n0*n1 equal to
// the submesh's device count, by increasing n0. (1, N) and (N, 1) are both
// present: they differ in which axis carries the cost of the links.
func LogicalShapes(s Submesh) [][2]int {
	n := s.NumDevices()
	var out [][2]int
	for n0 := 1; n0 <= n; n0++ {
		if n%n0 == 0 {
			out = append(out, [2]int{n0, n / n0})
		}
	}
	return out
}
