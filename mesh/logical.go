package mesh

import (
	"fmt"
	"math"
)

// A LogicalMesh views the devices of a submesh as a 2-D grid of Shape[0] ×
// Shape[1] devices. Devices is row-major: the device at mesh coordinate
// (i, j) is Devices[i*Shape[1]+j]. Over a multi-host submesh, consecutive
// devices share a host, so axis 0 is the slow one.
//
// Alpha[a] (seconds) and Beta[a] (seconds per byte) are the alpha–beta
// parameters of a collective along axis a.
type LogicalMesh struct {
	Shape   [2]int     `json:"shape"`
	Devices []DeviceID `json:"devices"`
	Alpha   [2]float64 `json:"alpha"`
	Beta    [2]float64 `json:"beta"`
	// net prices collectives as they run on the cluster (table.go); nil on a mesh
	// made by hand or read from JSON, which then uses the flat alpha–beta model.
	net *network
}

// NewLogicalMesh lays an (n0, n1) logical mesh over the submesh sub placed at
// the start of cluster c (host 0, device 0). See NewLogicalMeshAt.
func NewLogicalMesh(c *Cluster, sub Submesh, n0, n1 int) (*LogicalMesh, error) {
	return NewLogicalMeshAt(c, sub, 0, n0, n1)
}

// NewLogicalMeshAt lays an (n0, n1) logical mesh over the submesh sub whose
// first device is origin. It fails when n0*n1 is not the submesh's device
// count or the submesh does not fit the cluster from origin.
//
// An axis whose device groups all stay inside one host gets the intra-host
// latency and bandwidth; an axis with any group that crosses hosts gets the
// inter-host ones (the slowest link bounds a ring), with the per-device
// share of the host's network bandwidth.
func NewLogicalMeshAt(c *Cluster, sub Submesh, origin DeviceID, n0, n1 int) (*LogicalMesh, error) {
	if err := checkPlacement(c, sub, origin); err != nil {
		return nil, err
	}
	if n0 <= 0 || n1 <= 0 || n0*n1 != sub.NumDevices() {
		return nil, fmt.Errorf("mesh: logical mesh %dx%d does not cover submesh %s of %d devices",
			n0, n1, sub, sub.NumDevices())
	}
	m := &LogicalMesh{Shape: [2]int{n0, n1}}
	oh, od := c.HostOf(origin), int(origin)%c.DevicesPerHost
	for h := range sub.Hosts {
		for d := range sub.Devices {
			m.Devices = append(m.Devices, DeviceID((oh+h)*c.DevicesPerHost+od+d))
		}
	}
	for a := range 2 {
		m.Alpha[a], m.Beta[a] = c.IntraHostLatency, 1/c.IntraHostBandwidth
		if m.crossesHosts(c, AxisSet(1<<a)) {
			m.Alpha[a], m.Beta[a] = c.InterHostLatency, 1/c.InterHostBandwidthPerDevice()
		}
	}
	m.net = newNetwork(c, m)
	return m, nil
}

func checkPlacement(c *Cluster, sub Submesh, origin DeviceID) error {
	if sub.Hosts <= 0 || sub.Devices <= 0 {
		return fmt.Errorf("mesh: submesh %s must have positive hosts and devices", sub)
	}
	if origin < 0 || int(origin) >= c.Devices() {
		return fmt.Errorf("mesh: submesh origin device %d is outside cluster %q of %d devices",
			origin, c.Name, c.Devices())
	}
	oh, od := c.HostOf(origin), int(origin)%c.DevicesPerHost
	if oh+sub.Hosts > c.Hosts || od+sub.Devices > c.DevicesPerHost {
		return fmt.Errorf("mesh: submesh %s at device %d does not fit cluster %q of %d hosts × %d devices",
			sub, origin, c.Name, c.Hosts, c.DevicesPerHost)
	}
	return nil
}

// crossesHosts reports whether any device group along axes spans two hosts.
func (m *LogicalMesh) crossesHosts(c *Cluster, axes AxisSet) bool {
	for _, g := range m.Groups(axes) {
		for _, d := range g[1:] {
			if c.HostOf(d) != c.HostOf(g[0]) {
				return true
			}
		}
	}
	return false
}

// NewUniformMesh builds an (n0, n1) mesh over devices 0..n0*n1-1 with the
// same alpha and beta on both axes; the hand-checked cost tests use it with
// alpha = beta = 1.
func NewUniformMesh(n0, n1 int, alpha, beta float64) (*LogicalMesh, error) {
	if n0 <= 0 || n1 <= 0 {
		return nil, fmt.Errorf("mesh: logical mesh shape (%d, %d) must be positive", n0, n1)
	}
	if err := checkAlphaBeta(alpha, beta); err != nil {
		return nil, err
	}
	m := &LogicalMesh{
		Shape: [2]int{n0, n1},
		Alpha: [2]float64{alpha, alpha},
		Beta:  [2]float64{beta, beta},
	}
	for d := range n0 * n1 {
		m.Devices = append(m.Devices, DeviceID(d))
	}
	return m, nil
}

func checkAlphaBeta(alpha, beta float64) error {
	for _, v := range []float64{alpha, beta} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("mesh: alpha and beta must be finite and non-negative, got %v and %v", alpha, beta)
		}
	}
	return nil
}

// WithAxisCost returns a copy of m whose axis has the given alpha (s) and
// beta (s/byte). It panics if axis is not 0 or 1, or alpha or beta is
// negative or NaN: callers set these from code, not from user input.
func (m *LogicalMesh) WithAxisCost(axis int, alpha, beta float64) *LogicalMesh {
	mustAxis(axis)
	if err := checkAlphaBeta(alpha, beta); err != nil {
		panic(err)
	}
	c := *m
	c.Devices = append([]DeviceID(nil), m.Devices...)
	c.Alpha[axis], c.Beta[axis] = alpha, beta
	c.net = nil // the caller's alpha and beta, in the flat model
	return &c
}

func mustAxis(axis int) {
	if axis != 0 && axis != 1 {
		panic(fmt.Sprintf("mesh: mesh axis %d is not 0 or 1", axis))
	}
}

// Size returns the number of devices, Shape[0]*Shape[1].
func (m *LogicalMesh) Size() int { return m.Shape[0] * m.Shape[1] }

// Device returns the device at mesh coordinate (i, j).
func (m *LogicalMesh) Device(i, j int) DeviceID { return m.Devices[i*m.Shape[1]+j] }

// Coord returns the mesh coordinate of device d, or ok = false when d is not
// in the mesh.
func (m *LogicalMesh) Coord(d DeviceID) (i, j int, ok bool) {
	for k, x := range m.Devices {
		if x == d {
			return k / m.Shape[1], k % m.Shape[1], true
		}
	}
	return 0, 0, false
}

// AxisSize returns how many devices a group along axes has: 1 for none,
// Shape[a] for one axis, the mesh size for both.
func (m *LogicalMesh) AxisSize(axes AxisSet) int {
	n := 1
	for a := range 2 {
		if axes.Has(a) {
			n *= m.Shape[a]
		}
	}
	return n
}

// AxisCost returns alpha and beta for a collective along axes. For both axes
// at once it takes the slower (larger) alpha and beta of the two: a ring over
// the whole mesh runs at the pace of its slowest link. For no axes it returns
// zeros.
func (m *LogicalMesh) AxisCost(axes AxisSet) (alpha, beta float64) {
	for a := range 2 {
		if axes.Has(a) {
			alpha, beta = math.Max(alpha, m.Alpha[a]), math.Max(beta, m.Beta[a])
		}
	}
	return alpha, beta
}

// Groups returns the device groups that communicate in a collective along
// axes. Along axis 0 there are Shape[1] groups, group j holding (0..n0-1, j)
// in order of i; along axis 1 there are Shape[0] groups, group i holding
// (i, 0..n1-1); along both there is one group of all devices, row-major, and
// the position of a device in it is its shard index under S01. With no axes
// each device is its own group.
func (m *LogicalMesh) Groups(axes AxisSet) [][]DeviceID {
	n0, n1 := m.Shape[0], m.Shape[1]
	var out [][]DeviceID
	switch axes {
	case AxesNone:
		for _, d := range m.Devices {
			out = append(out, []DeviceID{d})
		}
	case Axis0:
		for j := range n1 {
			g := make([]DeviceID, n0)
			for i := range n0 {
				g[i] = m.Device(i, j)
			}
			out = append(out, g)
		}
	case Axis1:
		for i := range n0 {
			out = append(out, append([]DeviceID(nil), m.Devices[i*n1:(i+1)*n1]...))
		}
	default:
		out = append(out, append([]DeviceID(nil), m.Devices...))
	}
	return out
}

// String writes the mesh as "(n0, n1)".
func (m *LogicalMesh) String() string { return fmt.Sprintf("(%d, %d)", m.Shape[0], m.Shape[1]) }
