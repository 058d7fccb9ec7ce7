package mesh

import "fmt"

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

// A LogicalShape is the shape (n0, n1) of a logical mesh laid over a submesh's
// devices: n0 along the slow axis 0, n1 along axis 1. In a pipeline plan n0 is the
// data-parallel degree and n1 the tensor-parallel one.
type LogicalShape [2]int

// NumDevices returns n0*n1.
func (l LogicalShape) NumDevices() int { return l[0] * l[1] }

// String writes the shape as "N0xN1", e.g. "2x4", the way Submesh writes itself.
func (l LogicalShape) String() string { return fmt.Sprintf("%dx%d", l[0], l[1]) }
