package dp

import (
	"fmt"
	"slices"

	"github.com/autopar/autopar/mesh"
)

// Cluster is the search's view of a mesh.Cluster: its shape, and the memory a plan may
// use on each device, a budget that is the device's memory unless the user sets a smaller
// one. Bandwidths and FLOP/s live in the oracle's costs, not here. The budget is a
// float64 because every cost the oracle returns is; see docs/DECISIONS.md on why dp keeps
// this view rather than taking *mesh.Cluster.
type Cluster struct {
	Hosts           int
	DevicesPerHost  int
	MemoryPerDevice float64 // bytes
}

// ClusterOf is c's view, its budget c's DeviceMemoryBytes.
func ClusterOf(c *mesh.Cluster) Cluster {
	return Cluster{Hosts: c.Hosts, DevicesPerHost: c.DevicesPerHost, MemoryPerDevice: float64(c.DeviceMemoryBytes)}
}

// Devices is the number of devices in the cluster.
func (c Cluster) Devices() int { return c.Hosts * c.DevicesPerHost }

// validate reports a cluster that cannot be tiled by Alpa's submesh shapes.
func (c Cluster) validate() error {
	if c.Hosts <= 0 || c.DevicesPerHost <= 0 {
		return fmt.Errorf("dp: cluster has zero devices: %d hosts × %d devices per host", c.Hosts, c.DevicesPerHost)
	}
	if c.DevicesPerHost&(c.DevicesPerHost-1) != 0 {
		return fmt.Errorf("dp: devices per host must be a power of two for submeshes to tile the cluster, got %d", c.DevicesPerHost)
	}
	if !(c.MemoryPerDevice > 0) {
		return fmt.Errorf("dp: memory per device must be positive, got %g", c.MemoryPerDevice)
	}
	return nil
}

// legal reports whether s is one of Alpa's shapes on c, listed by Submeshes or not:
// (1, 2^k) with 2^k dividing DevicesPerHost, or (n, DevicesPerHost) with n ≤ Hosts.
func (c Cluster) legal(s mesh.Submesh) bool {
	if s.Hosts == 1 && s.Devices >= 1 && s.Devices <= c.DevicesPerHost {
		return s.Devices&(s.Devices-1) == 0 && c.DevicesPerHost%s.Devices == 0
	}
	return s.Hosts >= 1 && s.Hosts <= c.Hosts && s.Devices == c.DevicesPerHost
}

// shapes is Submeshes(c) with the submeshes k pins added, and per submesh LogicalShapes
// with the logical meshes of its size k pins added: a pinned shape the search would not
// enumerate (a manual plan's) is still tried. Both keep their listing order.
func shapes(c Cluster, k Constraints) ([]mesh.Submesh, [][]mesh.LogicalShape) {
	subs := Submeshes(c)
	for _, s := range pinnedSubmeshes(k) {
		if !slices.Contains(subs, s) {
			subs = append(subs, s)
		}
	}
	slices.SortStableFunc(subs, func(a, b mesh.Submesh) int { return a.NumDevices() - b.NumDevices() })
	logs := make([][]mesh.LogicalShape, len(subs))
	for i, s := range subs {
		logs[i] = LogicalShapes(s)
		for _, l := range pinnedLogicals(k) {
			if l.NumDevices() == s.NumDevices() && !slices.Contains(logs[i], l) {
				logs[i] = append(logs[i], l)
			}
		}
		slices.SortStableFunc(logs[i], func(a, b mesh.LogicalShape) int { return a[0] - b[0] })
	}
	return subs, logs
}

// ExhaustiveHosts is the most hosts on which Submeshes lists every shape of Alpa's: (1, 2^k)
// inside a host and (n, M) for every n. On more hosts it lists few shapes, not one per host
// count, so that the search's time and memory do not grow with the cluster (see Submeshes).
const ExhaustiveHosts = 16

// BalancedStages is the most pipeline stages for which, past ExhaustiveHosts, Submeshes
// lists the host counts that split the cluster evenly.
const BalancedStages = 16

// Submeshes lists the submesh shapes the search tries on c, smallest first. On at most
// ExhaustiveHosts hosts they are Alpa's: (1, 2^k) for every 2^k < DevicesPerHost, then
// (n, DevicesPerHost) for n = 1..Hosts. On more hosts a stage smaller than a host is
// never worth it, and only the host counts that split the cluster evenly into s stages are
// listed: ⌊Hosts/s⌋ and ⌈Hosts/s⌉ for s = 1..BalancedStages, at most 2·BalancedStages
// shapes whatever the cluster's size. Any s of them that sum to the cluster tile it, as
// whole hosts. The order is fixed; it is the tie-break order of [Solve].
func Submeshes(c Cluster) []mesh.Submesh {
	var out []mesh.Submesh
	if c.Hosts <= ExhaustiveHosts {
		for m := 1; m < c.DevicesPerHost; m *= 2 {
			out = append(out, mesh.Submesh{Hosts: 1, Devices: m})
		}
		for n := 1; n <= c.Hosts; n++ {
			out = append(out, mesh.Submesh{Hosts: n, Devices: c.DevicesPerHost})
		}
		return out
	}
	var hosts []int
	for s := 1; s <= BalancedStages && s <= c.Hosts; s++ {
		hosts = append(hosts, c.Hosts/s, (c.Hosts+s-1)/s)
	}
	slices.Sort(hosts)
	for _, n := range slices.Compact(hosts) {
		out = append(out, mesh.Submesh{Hosts: n, Devices: c.DevicesPerHost})
	}
	return out
}

// LogicalShapes lists the logical meshes (dp, mp) the search tries on s, dp ascending:
// inside one host every (dp, mp) with dp·mp = s.NumDevices(); on a submesh of whole hosts
// only those whose mp is a power of two dividing s.Devices (Alpa's tensor parallelism
// inside a host, data parallelism across hosts: an axis of mp devices never crosses a
// host), so that their number does not grow with the submesh. A mesh whose tensor axis
// spans hosts pays the network on every activation collective; it is left out as an
// approximation, measured in docs/DECISIONS.md ("Logical meshes on whole hosts"). The
// order is the tie-break order of [Solve].
func LogicalShapes(s mesh.Submesh) []mesh.LogicalShape {
	n := s.NumDevices()
	var out []mesh.LogicalShape
	if s.Hosts > 1 {
		for mp := s.Devices; mp >= 1; mp-- {
			if mp&(mp-1) == 0 && s.Devices%mp == 0 {
				out = append(out, mesh.LogicalShape{n / mp, mp})
			}
		}
		return out
	}
	for dp := 1; dp <= n; dp++ {
		if n%dp == 0 {
			out = append(out, mesh.LogicalShape{dp, n / dp})
		}
	}
	return out
}
