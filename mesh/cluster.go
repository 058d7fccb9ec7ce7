package mesh

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
)

// A Cluster is the hardware a plan targets: Hosts identical hosts, each with
// DevicesPerHost identical devices. Devices are numbered host-major: device
// d of host h has DeviceID h*DevicesPerHost + d.
//
// Bandwidths are in bytes per second, latencies in seconds. IntraHostBandwidth
// is what one device can send to another device of its host in one direction
// (NVLink/NVSwitch). InterHostBandwidth is the aggregate network bandwidth of
// one host (all its NICs together), which its devices share when they talk to
// other hosts at once; see InterHostBandwidthPerDevice.
//
// InterHostBandwidth and InterHostLatency are unused when Hosts is 1 and may
// then be zero.
type Cluster struct {
	Name                  string  `json:"name"`
	Hosts                 int     `json:"hosts"`
	DevicesPerHost        int     `json:"devices_per_host"`
	DeviceFLOPS           float64 `json:"device_flops"`
	DeviceMemoryBytes     int64   `json:"device_memory_bytes"`
	DeviceMemoryBandwidth float64 `json:"device_memory_bandwidth"`
	IntraHostBandwidth    float64 `json:"intra_host_bandwidth"`
	IntraHostLatency      float64 `json:"intra_host_latency"`
	InterHostBandwidth    float64 `json:"inter_host_bandwidth"`
	InterHostLatency      float64 `json:"inter_host_latency"`
	// Efficiency is the fraction of the peak FLOP/s that real kernels achieve,
	// in (0, 1]; compute times use the rates of FLOPs (or DeviceFLOPS) times it.
	Efficiency float64 `json:"efficiency"`

	// The fields below are optional: a spec written before they existed reads as
	// before, with the defaults each states.

	// FLOPs holds the peak FLOP/s per op class and precision (roofline.go). Absent,
	// every class and precision runs at DeviceFLOPS, which stays the peak that
	// model-FLOPs utilization is quoted against.
	FLOPs *FLOPTable `json:"flops,omitempty"`
	// TF32 runs f32 contractions and convolutions at the table's tf32 rate (tensor
	// cores). Default false: PyTorch's default for matmuls since 1.12.
	TF32 bool `json:"tf32,omitempty"`
	// KernelOverhead is the seconds every kernel costs beyond its roofline time (a
	// GPU's launch, the runtime's dispatch of one instruction). Default 0.
	KernelOverhead float64 `json:"kernel_overhead,omitempty"`
	// FuseElementwise prices the step as a fusing compiler runs it on a GPU: elementwise
	// chains, their input fusion into reductions, row reductions with the ops that use
	// their rows (softmax, layer norm and their gradients, as Megatron-LM's fused kernels
	// run them) and sibling consumers in one multi-output kernel. A kernel reads its
	// external inputs once, writes what is read outside it once and pays one
	// KernelOverhead (FusedOpTime; the rule in passes/sharding's fusion.go). Default
	// false: the built-in runtime runs each op as its own instruction, so the cpu preset
	// and calibrated files leave it off.
	FuseElementwise bool `json:"fuse_elementwise,omitempty"`
	// FuseEpilogue, with FuseElementwise, also fuses a bias add and a gelu or relu into
	// the matmul whose result they take, as cuBLASLt's epilogues (BIAS, GELU_BIAS,
	// RELU_BIAS, GELU_AUX_BIAS) run them. Default false, and off in the presets:
	// Megatron-LM (SC'21) runs the matmul without its bias and then one fused bias+gelu
	// kernel, which FuseElementwise prices.
	FuseEpilogue bool `json:"fuse_epilogue,omitempty"`
	// ClassOverhead is what a kernel of a class costs beyond KernelOverhead and its
	// roofline time: the fixed work of a contraction or convolution kernel (operand
	// transposes, one BLAS call per batch) that a one-element kernel does not show.
	// Default none.
	ClassOverhead *ClassOverheads `json:"class_overhead,omitempty"`
	// Collectives are measured prices of collectives inside one host (autopar
	// calibrate), replacing the ring formulas for the kinds and sizes listed.
	// Default none.
	Collectives []CollectiveFit `json:"collectives,omitempty"`
	// HostCores is how many processor cores the devices of a host share: the built-in
	// runtime's devices are goroutines on one machine (see Sharing). Default 0: every
	// device computes on its own (GPUs).
	HostCores int `json:"host_cores,omitempty"`
	// ContractionSpeedup is how many times faster than on one core a device computing alone
	// runs contractions and convolutions (gonum's Gemm splits a large call over the cores;
	// a small one runs on one), from 1 to HostCores. Default (0): HostCores.
	ContractionSpeedup float64 `json:"contraction_speedup,omitempty"`
}

// Sharing is the factor by which one device's kernels of class class slow down while
// devices devices of its host compute at once, when they share the host's HostCores
// cores. The rates are those of a device computing alone (as autopar calibrate measures
// them): alone, a device runs a contraction or a convolution s = ContractionSpeedup times
// faster than one core would, and vector work on one core (s = 1). With d devices busy
// each has C/d cores (C = HostCores), so it runs s / min(s, C/d) times slower than alone:
// d for a perfectly parallel Gemm (s = C), max(1, d/C) for vector work. Without
// HostCores, 1.
func (c *Cluster) Sharing(class OpClass, devices int) float64 {
	if c.HostCores <= 0 || devices <= 1 {
		return 1
	}
	s := 1.0
	if class.contraction() {
		s = float64(c.HostCores)
		if c.ContractionSpeedup > 0 {
			s = c.ContractionSpeedup
		}
	}
	return s / math.Min(s, float64(c.HostCores)/float64(devices))
}

// MaxDevices is the most devices a cluster may have: a DeviceID is an int32.
const MaxDevices = math.MaxInt32

// MaxDeviceMemoryBytes bounds a device's memory (1 EiB), so that sums of device memories
// and of the bytes priced against them stay far inside int64.
const MaxDeviceMemoryBytes = 1 << 60

// CountDevices returns the product of counts (hosts × devices per host, the axes of a
// mesh, the degrees of a manual plan) and whether it is at most MaxDevices. It never wraps:
// a product past MaxDevices, or a negative count, reports false.
func CountDevices(counts ...int) (int, bool) {
	n := uint64(1)
	for _, c := range counts {
		if c < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(c))
		if hi != 0 || lo > MaxDevices {
			return 0, false
		}
		n = lo
	}
	return int(n), true
}

// Devices returns the number of devices in the cluster.
func (c *Cluster) Devices() int { return c.Hosts * c.DevicesPerHost }

// HostOf returns the host that holds device d.
func (c *Cluster) HostOf(d DeviceID) int { return int(d) / c.DevicesPerHost }

// EffectiveFLOPS is the FLOP/s a device sustains on real kernels.
func (c *Cluster) EffectiveFLOPS() float64 { return c.DeviceFLOPS * c.Efficiency }

// ComputeTime returns the seconds one device needs for flops floating-point
// operations at its effective rate.
func (c *Cluster) ComputeTime(flops float64) float64 { return flops / c.EffectiveFLOPS() }

// InterHostBandwidthPerDevice is the bandwidth one device gets to another
// host when every device of its host sends across hosts at the same time,
// which is what a collective along a host-crossing mesh axis does: the host's
// aggregate bandwidth split evenly. It is deliberately conservative.
func (c *Cluster) InterHostBandwidthPerDevice() float64 {
	return c.InterHostBandwidth / float64(c.DevicesPerHost)
}

// Validate reports the first field that makes no sense, naming it.
func (c *Cluster) Validate() error {
	if c.Hosts <= 0 {
		return c.errorf("hosts must be positive, got %d", c.Hosts)
	}
	if c.DevicesPerHost <= 0 {
		return c.errorf("devices per host must be positive, got %d", c.DevicesPerHost)
	}
	if c.DeviceMemoryBytes <= 0 {
		return c.errorf("device memory bytes must be positive, got %d", c.DeviceMemoryBytes)
	}
	if c.DeviceMemoryBytes > MaxDeviceMemoryBytes {
		return c.errorf("device memory bytes %d is more than 1 EiB (%d), beyond any device", c.DeviceMemoryBytes, int64(MaxDeviceMemoryBytes))
	}
	if _, ok := CountDevices(c.Hosts, c.DevicesPerHost); !ok {
		return c.errorf("%d hosts × %d devices per host is more than the %d devices a cluster may have",
			c.Hosts, c.DevicesPerHost, MaxDevices)
	}
	multiHost := c.Hosts > 1
	checks := []struct {
		name     string
		v        float64
		positive bool // false: zero allowed
	}{
		{"device FLOP/s", c.DeviceFLOPS, true},
		{"device memory bandwidth", c.DeviceMemoryBandwidth, true},
		{"intra-host bandwidth", c.IntraHostBandwidth, true},
		{"intra-host latency", c.IntraHostLatency, false},
		{"inter-host bandwidth", c.InterHostBandwidth, multiHost},
		{"inter-host latency", c.InterHostLatency, false},
	}
	for _, k := range checks {
		if err := c.checkNumber(k.name, k.v, k.positive); err != nil {
			return err
		}
	}
	if math.IsNaN(c.Efficiency) || c.Efficiency <= 0 || c.Efficiency > 1 {
		return c.errorf("efficiency must be in (0, 1], got %v", c.Efficiency)
	}
	if c.HostCores < 0 || c.HostCores > MaxDevices {
		return c.errorf("host cores must be 0 (devices do not share cores) to %d, got %d", MaxDevices, c.HostCores)
	}
	if sp := c.ContractionSpeedup; math.IsNaN(sp) || sp != 0 && (sp < 1 || sp > float64(max(1, c.HostCores))) {
		return c.errorf("contraction speedup must be 0 (default) or from 1 to the %d host cores, got %v", c.HostCores, sp)
	}
	if err := c.validateRoofline(); err != nil {
		return err
	}
	return c.validateCollectives()
}

func (c *Cluster) checkNumber(name string, v float64, positive bool) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return c.errorf("%s must be finite, got %v", name, v)
	case positive && v <= 0:
		return c.errorf("%s must be positive, got %v", name, v)
	case v < 0:
		return c.errorf("%s must not be negative, got %v", name, v)
	}
	return nil
}

func (c *Cluster) errorf(format string, args ...any) error {
	return fmt.Errorf("mesh: cluster %q: %s", c.Name, fmt.Sprintf(format, args...))
}

// String gives a one-line summary, e.g. "dgx-a100: 2 hosts × 8 devices".
func (c *Cluster) String() string {
	return fmt.Sprintf("%s: %d hosts × %d devices", c.Name, c.Hosts, c.DevicesPerHost)
}

// clusterFields has Cluster's fields without its methods, so that
// UnmarshalJSON can decode into it without recursing.
type clusterFields Cluster

// UnmarshalJSON decodes strictly (an unknown or misspelt field is an error,
// so a typo never silently becomes a zero) and validates the result, so a
// Cluster read from any JSON document, plan.json included, makes sense.
func (c *Cluster) UnmarshalJSON(data []byte) error {
	cand, err := ParseClusterJSON(data, "")
	if err != nil {
		return err
	}
	*c = *cand
	return nil
}

// ParseClusterJSON decodes and validates a JSON cluster spec. An empty name
// becomes def.
func ParseClusterJSON(data []byte, def string) (*Cluster, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f clusterFields
	if err := dec.Decode(&f); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("mesh: cluster spec %q is empty, expected a JSON object", def)
		}
		return nil, fmt.Errorf("mesh: cluster spec %q: %w", def, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("mesh: cluster spec %q: trailing data after the JSON object", def)
	}
	c := Cluster(f)
	if len(c.Collectives) == 0 {
		c.Collectives = nil // "collectives": [] reads back as absent, as it is written
	}
	if c.Name == "" {
		c.Name = def
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// MaxClusterFileBytes bounds what LoadCluster reads: a spec is a dozen fields, so 1 MiB
// only ever stops a wrong path (/dev/zero, a model file, a FIFO).
const MaxClusterFileBytes = 1 << 20

// LoadCluster reads a JSON cluster spec from path. A spec without a name is
// named after the file, without its extension. A file over MaxClusterFileBytes is refused.
func LoadCluster(path string) (*Cluster, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxClusterFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	if len(data) > MaxClusterFileBytes {
		return nil, fmt.Errorf("mesh: cluster spec %s: larger than 1 MiB, the most a cluster spec may hold", path)
	}
	def := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	c, err := ParseClusterJSON(data, def)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
