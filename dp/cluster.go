package dp

import "fmt"

// Cluster is what dp needs to know about the machines: their count and how much memory
// each device offers. Bandwidths and FLOP/s live in the oracle's costs, not here.
type Cluster struct {
	Hosts           int
	DevicesPerHost  int
	MemoryPerDevice float64 // bytes
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

// Submesh is a physical block of Hosts hosts × Devices devices on each host.
type Submesh struct {
	Hosts, Devices int
}

// Size is the number of devices in the submesh.
func (s Submesh) Size() int { return s.Hosts * s.Devices }

func (s Submesh) String() string { return fmt.Sprintf("(%d, %d)", s.Hosts, s.Devices) }

// Logical is a logical mesh (n0, n1) = (DP, MP) laid over a submesh's devices; axis 0 is the
// slow one when the submesh spans hosts.
type Logical struct {
	DP, MP int
}

// Size is the number of devices the logical mesh covers.
func (l Logical) Size() int { return l.DP * l.MP }

func (l Logical) String() string { return fmt.Sprintf("(%d, %d)", l.DP, l.MP) }

// Submeshes lists Alpa's submesh shapes for c, smallest first: (1, 2^k) for every
// 2^k ≤ DevicesPerHost, then (n, DevicesPerHost) for n = 2..Hosts ((1, DevicesPerHost) is
// listed once). The order is fixed; it is the tie-break order of [Solve].
func Submeshes(c Cluster) []Submesh {
	var out []Submesh
	for m := 1; m < c.DevicesPerHost; m *= 2 {
		out = append(out, Submesh{1, m})
	}
	for n := 1; n <= c.Hosts; n++ {
		out = append(out, Submesh{n, c.DevicesPerHost})
	}
	return out
}

// LogicalShapes lists every (dp, mp) with dp·mp = s.Size(), dp ascending. The order is the
// tie-break order of [Solve].
func LogicalShapes(s Submesh) []Logical {
	n := s.Size()
	var out []Logical
	for dp := 1; dp <= n; dp++ {
		if n%dp == 0 {
			out = append(out, Logical{dp, n / dp})
		}
	}
	return out
}
