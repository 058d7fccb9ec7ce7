package mesh

import "fmt"

// A Collective is one step of communication (or the free local slice) over
// the device groups along a set of mesh axes. The names match codegen's
// instructions.
type Collective uint8

// The collectives. Slice is local: each device keeps the block it needs of
// what it already holds, at no cost.
const (
	Slice Collective = iota
	AllGather
	ReduceScatter
	AllReduce
	AllToAll
)

var collectiveNames = [...]string{"slice", "all_gather", "reduce_scatter", "all_reduce", "all_to_all"}

// String returns the instruction name, e.g. "all_gather".
func (k Collective) String() string {
	if int(k) < len(collectiveNames) {
		return collectiveNames[k]
	}
	return fmt.Sprintf("collective(%d)", uint8(k))
}

// SentFraction is the factor f with bytes sent per device = f·B under ring
// algorithms, where B is the full size of the tensor the group of n devices
// is reducing or gathering (the union of their blocks, or for an all-reduce
// and a reduce-scatter the size of each device's input):
//
//	all-reduce                   2(n−1)/n  (reduce-scatter then all-gather)
//	all-gather, reduce-scatter    (n−1)/n  (n−1 steps of B/n)
//	all-to-all                   (n−1)/n²  (each device keeps 1/n of its B/n)
//	slice                         0
//
// Bytes received equal bytes sent for every device. With n ≤ 1 nothing moves.
func SentFraction(k Collective, n int) float64 {
	if n <= 1 {
		return 0
	}
	f := float64(n-1) / float64(n)
	switch k {
	case AllReduce:
		return 2 * f
	case AllGather, ReduceScatter:
		return f
	case AllToAll:
		return f / float64(n)
	}
	return 0
}

// BytesSent returns the bytes each of n devices sends in collective k on a
// tensor of B bytes (see SentFraction for what B is). The runtime's traffic
// counters must match it.
func BytesSent(k Collective, n int, bytes float64) float64 {
	return SentFraction(k, n) * bytes
}

// CollectiveTime is the flat alpha–beta time of collective k over n devices:
// α + β·BytesSent. That gives all-reduce α + 2β(n−1)/n·B, all-gather and
// reduce-scatter α + β(n−1)/n·B, all-to-all α + β(n−1)/n²·B; zero for a
// slice and whenever n = 1. It is Alpa's model, kept for meshes made by hand
// (NewUniformMesh, WithAxisCost) whose known-answer tests are stated in it;
// meshes laid over a cluster are priced by the algorithm table (table.go).
func CollectiveTime(k Collective, n int, alpha, beta, bytes float64) float64 {
	if k == Slice || n <= 1 {
		return 0
	}
	return alpha + beta*BytesSent(k, n, bytes)
}

// Cost is the time of collective k along axes of m on a tensor of B bytes. A
// mesh laid over a cluster (NewLogicalMeshAt) prices it as the collective runs
// there: a measured fit of the cluster when it has one for the kind and group
// size, else the ring algorithm inside a host and the hierarchical one across
// hosts (GroupTime). A mesh made by hand uses the flat CollectiveTime with the
// slower axis's alpha and beta (see AxisCost).
func (m *LogicalMesh) Cost(k Collective, axes AxisSet, bytes float64) float64 {
	n := m.AxisSize(axes)
	if m.net == nil {
		alpha, beta := m.AxisCost(axes)
		return CollectiveTime(k, n, alpha, beta, bytes)
	}
	return m.net.time(k, n, m.net.hosts[axes&AxesBoth], bytes)
}

// SendRecvCost is the time α + β·B to send B bytes from each device of the
// mesh from to its peer in the mesh to, for the pipeline edge between two
// stages. It uses intra-host numbers when every device of both meshes is on
// one host, and inter-host numbers (each device's share of its host's
// network) otherwise. Zero bytes cost nothing.
func (c *Cluster) SendRecvCost(from, to *LogicalMesh, bytes float64) float64 {
	if bytes <= 0 {
		return 0
	}
	if c.sameHost(from) && c.sameHost(to) && c.HostOf(from.Devices[0]) == c.HostOf(to.Devices[0]) {
		return c.IntraHostLatency + bytes/c.IntraHostBandwidth
	}
	return c.InterHostLatency + bytes/c.InterHostBandwidthPerDevice()
}

// sameHost reports whether all devices of m are on one host.
func (c *Cluster) sameHost(m *LogicalMesh) bool {
	for _, d := range m.Devices {
		if c.HostOf(d) != c.HostOf(m.Devices[0]) {
			return false
		}
	}
	return true
}

// MarshalText writes the instruction name.
func (k Collective) MarshalText() ([]byte, error) {
	if int(k) >= len(collectiveNames) {
		return nil, fmt.Errorf("mesh: unknown collective %d", uint8(k))
	}
	return []byte(k.String()), nil
}

// UnmarshalText reads an instruction name.
func (k *Collective) UnmarshalText(text []byte) error {
	for i, n := range collectiveNames {
		if n == string(text) {
			*k = Collective(i)
			return nil
		}
	}
	return fmt.Errorf("mesh: unknown collective %q", text)
}
