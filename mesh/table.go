package mesh

import (
	"fmt"
	"math"
)

// The collective table: how each collective runs, and so what it costs, inside one host
// and across hosts, the way NCCL runs them. Every algorithm is a number of steps; each step
// pays its link's latency α once and moves its bytes at the link's β (seconds per byte).
// B is the tensor size of the flat model (see SentFraction): for an all-reduce or a
// reduce-scatter the size of each device's input, for an all-gather the size of the
// result, for an all-to-all the union of the blocks of the group.
//
// Inside one host, n devices (ring):
//
//	all-reduce      ring reduce-scatter then ring all-gather: 2(n−1) steps of B/n
//	all-gather      n−1 steps of B/n
//	reduce-scatter  n−1 steps of B/n
//	all-to-all      n−1 pairwise steps of B/n² (each device sends each peer its block)
//
// Across h hosts with g = n/h devices of the group on each (hierarchical):
//
//	all-reduce      ring reduce-scatter inside each host (g−1 steps of B/n), then g
//	                concurrent ring all-reduces across hosts, one per local rank, on B/g
//	                (2(h−1) steps of B/n over the network), then ring all-gather inside
//	                each host (g−1 steps of B/n)
//	all-gather      ring all-gather across hosts per local rank (h−1 steps of B/n over the
//	                network), then ring all-gather inside each host of blocks of B/g
//	                (g−1 steps of B/n)
//	reduce-scatter  the mirror image: inside each host first, then across hosts
//	all-to-all      g−1 pairwise steps inside the host and n−g across hosts, B/n² each
//
// The network link is a device's share of its host's NICs (InterHostBandwidthPerDevice):
// all g local ranks cross at once.
var collectiveTable = [...]struct {
	kind Collective
	// ring is the time inside one host.
	ring func(n float64, l Link, B float64) float64
	// hier is the time across h hosts with g devices of the group on each.
	hier func(h, g float64, intra, inter Link, B float64) float64
}{
	{AllReduce,
		func(n float64, l Link, B float64) float64 { return l.steps(2*(n-1), B/n) },
		func(h, g float64, in, ex Link, B float64) float64 {
			n := h * g
			return in.steps(g-1, B/n) + ex.steps(2*(h-1), B/n) + in.steps(g-1, B/n)
		}},
	{AllGather,
		func(n float64, l Link, B float64) float64 { return l.steps(n-1, B/n) },
		func(h, g float64, in, ex Link, B float64) float64 {
			n := h * g
			return ex.steps(h-1, B/n) + in.steps(g-1, B/n)
		}},
	{ReduceScatter,
		func(n float64, l Link, B float64) float64 { return l.steps(n-1, B/n) },
		func(h, g float64, in, ex Link, B float64) float64 {
			n := h * g
			return in.steps(g-1, B/n) + ex.steps(h-1, B/n)
		}},
	{AllToAll,
		func(n float64, l Link, B float64) float64 { return l.steps(n-1, B/(n*n)) },
		func(h, g float64, in, ex Link, B float64) float64 {
			n := h * g
			return in.steps(g-1, B/(n*n)) + ex.steps(n-g, B/(n*n))
		}},
}

// A Link is one hop: Alpha seconds of latency per step, Beta seconds per byte.
type Link struct {
	Alpha, Beta float64
}

// steps is the time of k steps of b bytes each.
func (l Link) steps(k, b float64) float64 {
	if k <= 0 {
		return 0
	}
	return k * (l.Alpha + l.Beta*b)
}

// GroupTime is the time of collective k over a group of n devices spread evenly over
// hosts hosts, as the table above runs it: the ring inside one host (hosts ≤ 1), the
// hierarchical algorithm across hosts. A slice, a group of one device, or a kind the table
// does not hold costs nothing.
func GroupTime(k Collective, n, hosts int, intra, inter Link, B float64) float64 {
	if k == Slice || n <= 1 {
		return 0
	}
	for _, row := range collectiveTable {
		if row.kind != k {
			continue
		}
		if hosts <= 1 {
			return row.ring(float64(n), intra, B)
		}
		g := math.Ceil(float64(n) / float64(hosts))
		return row.hier(float64(hosts), g, intra, inter, B)
	}
	return 0
}

// A CollectiveFit is a measured price of one collective on a group of Devices devices of
// one host, as autopar calibrate fits it: Alpha + Beta·BytesSent(Kind, Devices, B) seconds.
// It replaces the ring formula for that kind and size.
type CollectiveFit struct {
	Kind    Collective `json:"kind"`
	Devices int        `json:"devices"`
	Alpha   float64    `json:"alpha"` // seconds
	Beta    float64    `json:"beta"`  // seconds per byte each device sends
}

// network is what a mesh laid over a cluster needs to price its collectives.
type network struct {
	intra, inter Link
	fits         []CollectiveFit
	// hosts[axes] is how many hosts one device group along axes spans (all groups are
	// alike on Alpa's submeshes).
	hosts [4]int
}

func newNetwork(c *Cluster, m *LogicalMesh) *network {
	nw := &network{
		intra: Link{c.IntraHostLatency, 1 / c.IntraHostBandwidth},
		fits:  c.Collectives,
	}
	if c.Hosts > 1 {
		nw.inter = Link{c.InterHostLatency, 1 / c.InterHostBandwidthPerDevice()}
	}
	for _, axes := range []AxisSet{AxesNone, Axis0, Axis1, AxesBoth} {
		seen := map[int]bool{}
		for _, d := range m.Groups(axes)[0] {
			seen[c.HostOf(d)] = true
		}
		nw.hosts[axes] = len(seen)
	}
	return nw
}

// HostDevices is how many of the mesh's devices share one host: all of them on a mesh made
// by hand.
func (m *LogicalMesh) HostDevices() int {
	if m.net == nil || m.net.hosts[AxesBoth] <= 1 {
		return m.Size()
	}
	return (m.Size() + m.net.hosts[AxesBoth] - 1) / m.net.hosts[AxesBoth]
}

func (nw *network) time(k Collective, n, hosts int, B float64) float64 {
	if k == Slice || n <= 1 {
		return 0
	}
	if hosts <= 1 {
		for _, f := range nw.fits {
			if f.Kind == k && f.Devices == n {
				return f.Alpha + f.Beta*BytesSent(k, n, B)
			}
		}
	}
	return GroupTime(k, n, hosts, nw.intra, nw.inter, B)
}

// validateCollectives checks the measured fits: a real collective, a group of 2 to the
// cluster's devices per host, finite non-negative alpha and beta, one fit per kind and size.
func (c *Cluster) validateCollectives() error {
	seen := map[[2]int]bool{}
	for i, f := range c.Collectives {
		where := fmt.Sprintf("collectives[%d]", i)
		if f.Kind == Slice || int(f.Kind) >= len(collectiveNames) {
			return c.errorf("%s: kind must be all_reduce, all_gather, reduce_scatter or all_to_all, got %q", where, f.Kind)
		}
		if f.Devices < 2 || f.Devices > c.DevicesPerHost {
			return c.errorf("%s: devices must be 2 to the %d devices per host, got %d", where, c.DevicesPerHost, f.Devices)
		}
		if err := c.checkNumber(where+".alpha", f.Alpha, false); err != nil {
			return err
		}
		if err := c.checkNumber(where+".beta", f.Beta, false); err != nil {
			return err
		}
		key := [2]int{int(f.Kind), f.Devices}
		if seen[key] {
			return c.errorf("%s: a second fit of %s on %d devices", where, f.Kind, f.Devices)
		}
		seen[key] = true
	}
	return nil
}

// PriceKey is what the mesh's collective prices (Cost) and HostDevices read besides its
// Shape, Alpha and Beta, as a comparable value: two meshes with equal shapes, alphas, betas
// and price keys price every collective alike, wherever their devices sit. The cluster's
// table of measured collectives is keyed by identity (it is not changed once meshes are
// laid over the cluster).
type PriceKey struct {
	flat         bool // no network: the flat alpha–beta model
	intra, inter Link
	fits         *CollectiveFit
	numFits      int
	hosts        [4]int
}

// PriceKey returns the mesh's PriceKey.
func (m *LogicalMesh) PriceKey() PriceKey {
	if m.net == nil {
		return PriceKey{flat: true}
	}
	k := PriceKey{intra: m.net.intra, inter: m.net.inter, numFits: len(m.net.fits), hosts: m.net.hosts}
	if len(m.net.fits) > 0 {
		k.fits = &m.net.fits[0]
	}
	return k
}
