package mesh

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Preset numbers. DeviceFLOPS is the vendors' dense tensor-core peak (what
// model-FLOPs utilization is quoted against); FLOPs holds the peak per op class
// and precision from the same datasheets, dense (the datasheets' headline
// tensor-core numbers are with 2:4 sparsity, twice these). Bandwidths are per
// direction. Efficiency is the fraction of peak large matmuls reach in
// practice (MLPerf-style measurements), not a promise; it scales every rate.
// KernelOverhead is a few µs of launch and synchronization per kernel, the
// usual CUDA figure: an assumption, not fitted to any run. FuseElementwise is
// on for the GPUs: XLA fuses elementwise chains into each other and into
// reductions, and Megatron-LM runs fused bias+gelu, scale+mask+softmax,
// bias+dropout+add and layer-norm kernels (Narayanan et al., SC'21, §4.2);
// off for cpu, whose runtime runs one instruction per op. FuseEpilogue is off:
// Megatron-LM runs its matmuls without cuBLASLt epilogues.
var presets = map[string]func() Cluster{
	// AWS p3.16xlarge, Alpa's testbed: 8× V100-SXM2 16 GB, 125 TFLOP/s fp16
	// tensor cores, 900 GB/s HBM2. NVLink 2 in a hybrid cube mesh gives each
	// GPU 6 links × 25 GB/s = 150 GB/s; NCCL reaches about 130 GB/s of bus
	// bandwidth on it, which is what we use. Hosts talk over 25 Gb/s
	// Ethernet (3.125 GB/s per host, shared by its 8 GPUs) with TCP
	// latencies of tens of µs.
	"p3.16xlarge": func() Cluster {
		return Cluster{
			Name: "p3.16xlarge", Hosts: 1, DevicesPerHost: 8,
			DeviceFLOPS: 125e12, DeviceMemoryBytes: 16 << 30, DeviceMemoryBandwidth: 900e9,
			IntraHostBandwidth: 130e9, IntraHostLatency: 5e-6,
			InterHostBandwidth: 25e9 / 8, InterHostLatency: 30e-6,
			Efficiency: 0.5,
			// V100 SXM2 datasheet: FP32 15.7 TFLOP/s, tensor cores 125 (fp16
			// only: no TF32 on Volta); fp16 outside tensor cores runs as half2
			// at twice the FP32 rate (Volta whitepaper).
			FLOPs: &FLOPTable{
				Matmul: &Rates{F32: 15.7e12, F16: 125e12},
				Vector: &Rates{F32: 15.7e12, F16: 31.4e12},
			},
			KernelOverhead:  5e-6,
			FuseElementwise: true,
		}
	},
	// NVIDIA DGX A100 (80 GB): 312 TFLOP/s bf16 dense, 2.04 TB/s HBM2e,
	// NVSwitch 300 GB/s per GPU per direction, 8× 200 Gb/s InfiniBand per
	// host = 200 GB/s aggregate, i.e. one 25 GB/s NIC per GPU.
	"dgx-a100": func() Cluster {
		return Cluster{
			Name: "dgx-a100", Hosts: 1, DevicesPerHost: 8,
			DeviceFLOPS: 312e12, DeviceMemoryBytes: 80 << 30, DeviceMemoryBandwidth: 2.039e12,
			IntraHostBandwidth: 300e9, IntraHostLatency: 3e-6,
			InterHostBandwidth: 8 * 200e9 / 8, InterHostLatency: 10e-6,
			Efficiency: 0.6,
			// A100 80GB SXM datasheet: FP32 19.5 TFLOP/s, TF32 tensor cores
			// 156, FP16/BF16 tensor cores 312; A100 whitepaper: FP16 outside
			// tensor cores 78.
			FLOPs: &FLOPTable{
				Matmul: &Rates{F32: 19.5e12, TF32: 156e12, F16: 312e12},
				Vector: &Rates{F32: 19.5e12, F16: 78e12},
			},
			KernelOverhead:  4e-6,
			FuseElementwise: true,
		}
	},
	// NVIDIA DGX H100: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3, NVSwitch
	// 450 GB/s per GPU per direction, 8× 400 Gb/s InfiniBand per host =
	// 400 GB/s aggregate.
	"dgx-h100": func() Cluster {
		return Cluster{
			Name: "dgx-h100", Hosts: 1, DevicesPerHost: 8,
			DeviceFLOPS: 989e12, DeviceMemoryBytes: 80 << 30, DeviceMemoryBandwidth: 3.35e12,
			IntraHostBandwidth: 450e9, IntraHostLatency: 3e-6,
			InterHostBandwidth: 8 * 400e9 / 8, InterHostLatency: 10e-6,
			Efficiency: 0.55,
			// H100 SXM datasheet: FP32 67 TFLOP/s, TF32 tensor cores 494.7
			// dense, FP16/BF16 tensor cores 989.4 dense; H100 whitepaper: FP16
			// outside tensor cores 133.8.
			FLOPs: &FLOPTable{
				Matmul: &Rates{F32: 67e12, TF32: 494.7e12, F16: 989e12},
				Vector: &Rates{F32: 67e12, F16: 133.8e12},
			},
			KernelOverhead:  4e-6,
			FuseElementwise: true,
		}
	},
	// The built-in runtime: one host whose "devices" are goroutines sharing
	// the CPU and its memory. Inter-host numbers mirror the intra-host ones
	// so that a spec edited to several hosts stays valid. The rates, of a
	// device computing alone, are rounded from autopar calibrate on the
	// project's 2-core development machine (shared and loaded, so they are
	// rough); HostCores is its 2 cores. autopar calibrate measures the
	// machine at hand.
	"cpu": func() Cluster {
		return Cluster{
			Name: "cpu", Hosts: 1, DevicesPerHost: cpuDefaultDevices,
			DeviceFLOPS: 2e9, DeviceMemoryBytes: 8 << 30, DeviceMemoryBandwidth: 1e9,
			IntraHostBandwidth: 100e6, IntraHostLatency: 20e-6,
			InterHostBandwidth: 100e6, InterHostLatency: 20e-6,
			Efficiency: 1,
			FLOPs: &FLOPTable{
				Matmul: &Rates{F32: 2e9, F16: 1e9},
				Conv:   &Rates{F32: 1.2e9, F16: 1e9},
				Vector: &Rates{F32: 100e6, F16: 30e6},
			},
			KernelOverhead: 3e-6,
			HostCores:      2,
		}
	},
}

// cpuDefaultDevices is the device count of a bare "cpu" cluster.
const cpuDefaultDevices = 4

// Presets returns the names of the built-in clusters, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns a fresh copy of the named built-in cluster with one host
// (for "cpu": one host with 4 devices).
func Preset(name string) (*Cluster, error) {
	mk, ok := presets[name]
	if !ok {
		return nil, fmt.Errorf("mesh: unknown cluster preset %q (known: %s)",
			name, strings.Join(Presets(), ", "))
	}
	c := mk()
	return &c, nil
}

// ParseCluster turns a --cluster argument into a Cluster:
//
//   - "dgx-a100" is one host of the preset, "dgx-a100:16" sixteen hosts;
//   - for "cpu" the count is devices, not hosts: "cpu:8" is one host with 8
//     goroutine devices (a bare "cpu" has 4);
//   - anything ending in ".json" or containing a path separator, or naming an
//     existing file that is not a preset, is loaded with LoadCluster.
func ParseCluster(s string) (*Cluster, error) {
	if strings.HasSuffix(s, ".json") || strings.ContainsRune(s, os.PathSeparator) {
		return LoadCluster(s)
	}
	name, count, hasCount := strings.Cut(s, ":")
	if _, ok := presets[name]; !ok {
		if _, err := os.Stat(s); err == nil {
			return LoadCluster(s)
		}
	}
	c, err := Preset(name)
	if err != nil || !hasCount {
		return c, err
	}
	n, err := strconv.Atoi(count)
	if err != nil || n <= 0 || count[0] == '+' {
		return nil, fmt.Errorf("mesh: cluster %q: count after ':' must be a positive integer, got %q", s, count)
	}
	if name == "cpu" {
		c.DevicesPerHost = n
	} else {
		c.Hosts = n
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
