package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The roofline by hand on a made-up device: 100 FLOP/s f32 matmul, 400 f16, 10 vector,
// 50 B/s of memory, 0.5 s per kernel, efficiency 1/2.
func TestOpTimeByHand(t *testing.T) {
	c := &Cluster{Name: "toy", Hosts: 1, DevicesPerHost: 1, DeviceFLOPS: 1000, DeviceMemoryBytes: 1,
		DeviceMemoryBandwidth: 50, IntraHostBandwidth: 1, Efficiency: 0.5, KernelOverhead: 0.5,
		FLOPs: &FLOPTable{Matmul: &Rates{F32: 100, TF32: 200, F16: 400}, Vector: &Rates{F32: 10}}}
	require.NoError(t, c.Validate())
	assert.InDelta(t, 1000/50.0+0.5, c.OpTime(ClassMatmul, F32, 1000, 10), 1e-12, "compute bound: 1000 FLOP at 50 FLOP/s")
	assert.InDelta(t, 1000/200.0+0.5, c.OpTime(ClassMatmul, F16, 1000, 10), 1e-12)
	assert.InDelta(t, 1000/50.0+0.5, c.OpTime(ClassConv, F32, 1000, 10), 1e-12, "conv falls back to matmul")
	assert.InDelta(t, 10000/50.0+0.5, c.OpTime(ClassMatmul, F32, 1000, 10000), 1e-12, "memory bound: 10000 B at 50 B/s")
	assert.InDelta(t, 20/5.0+0.5, c.OpTime(ClassVector, F16, 20, 1), 1e-12, "vector f16 falls back to vector f32")
	assert.InDelta(t, 0.5, c.OpTime(ClassVector, F32, 0, 0), 1e-12, "an empty kernel still pays its overhead")
	c.TF32 = true
	assert.InDelta(t, 1000/100.0+0.5, c.OpTime(ClassMatmul, F32, 1000, 10), 1e-12, "f32 contractions on tf32")
	assert.InDelta(t, 20/5.0+0.5, c.OpTime(ClassVector, F32, 20, 1), 1e-12, "never vector work")
	c.FLOPs = nil
	assert.InDelta(t, 1000/500.0+0.5, c.OpTime(ClassMatmul, F16, 1000, 10), 1e-12, "no table: DeviceFLOPS")
	c.ClassOverhead = &ClassOverheads{Matmul: 2, Conv: 3}
	assert.InDelta(t, 1000/500.0+0.5+2, c.OpTime(ClassMatmul, F16, 1000, 10), 1e-12, "a contraction's fixed cost")
	assert.InDelta(t, 1000/500.0+0.5+3, c.OpTime(ClassConv, F16, 1000, 10), 1e-12)
	assert.InDelta(t, 0.5, c.OpTime(ClassVector, F32, 0, 0), 1e-12, "none for vector work")
}

// The classes a spec written before them lacks fall back, rates and overheads: batched
// contractions to matmul, reductions to vector; with their own, they use them.
func TestNewClassesFallBack(t *testing.T) {
	c := &Cluster{Name: "toy", Hosts: 1, DevicesPerHost: 1, DeviceFLOPS: 1000, DeviceMemoryBytes: 1,
		DeviceMemoryBandwidth: 1e9, IntraHostBandwidth: 1, Efficiency: 1, TF32: true,
		FLOPs:         &FLOPTable{Matmul: &Rates{F32: 100, TF32: 200}, Vector: &Rates{F32: 10}},
		ClassOverhead: &ClassOverheads{Matmul: 2, Vector: 1}}
	require.NoError(t, c.Validate())
	assert.InDelta(t, 1000/200.0+2, c.OpTime(ClassBatchedMatmul, F32, 1000, 1), 1e-12, "batched as matmul, tf32 included")
	assert.InDelta(t, 100/10.0+1, c.OpTime(ClassReduce, F32, 100, 1), 1e-12, "reduce as vector")
	c.FLOPs.BatchedMatmul = &Rates{F32: 50}
	c.FLOPs.Reduce = &Rates{F32: 40}
	c.ClassOverhead.BatchedMatmul = 3
	require.NoError(t, c.Validate())
	assert.InDelta(t, 1000/50.0+3, c.OpTime(ClassBatchedMatmul, F32, 1000, 1), 1e-12, "its own rate and overhead (no tf32 rate: f32's)")
	assert.InDelta(t, 100/40.0, c.OpTime(ClassReduce, F32, 100, 1), 1e-12, "its own rate, no overhead of its own")
	assert.InDelta(t, 100/10.0+1, c.OpTime(ClassVector, F32, 100, 1), 1e-12, "vector unchanged")
	for _, cl := range OpClasses {
		assert.NotContains(t, cl.String(), "class(")
	}
}

// A spec written before the roofline fields reads as before: no table, no overhead.
func TestOldClusterSpecReads(t *testing.T) {
	c, err := ParseClusterJSON([]byte(`{"name":"old","hosts":1,"devices_per_host":2,"device_flops":1e12,
		"device_memory_bytes":8589934592,"device_memory_bandwidth":1e11,"intra_host_bandwidth":1e10,"efficiency":0.5}`), "")
	require.NoError(t, err)
	assert.Nil(t, c.FLOPs)
	assert.Zero(t, c.KernelOverhead)
	assert.Equal(t, 0.5e12, c.Rate(ClassMatmul, F16))
}

func TestRooflineFieldsValidate(t *testing.T) {
	base := `{"name":"c","hosts":1,"devices_per_host":2,"device_flops":1e12,"device_memory_bytes":8589934592,` +
		`"device_memory_bandwidth":1e11,"intra_host_bandwidth":1e10,"efficiency":1,`
	for _, tc := range []struct{ edit, want string }{
		{`"kernel_overhead":-1}`, "kernel overhead must not be negative"},
		{`"class_overhead":{"conv":-1}}`, "class_overhead.conv must not be negative"},
		{`"host_cores":-2}`, "host cores must be 0 (devices do not share cores) to 2147483647, got -2"},
		{`"host_cores":2,"contraction_speedup":3}`, "contraction speedup must be 0 (default) or from 1 to the 2 host cores, got 3"},
		{`"contraction_speedup":0.5}`, "contraction speedup must be 0 (default) or from 1 to the 0 host cores, got 0.5"},
		{`"flops":{"matmul":{"f16":-5}}}`, "flops.matmul.f16 must not be negative"},
		{`"flops":{"reduce":{"f32":-1}}}`, "flops.reduce.f32 must not be negative"},
		{`"flops":{"batched_matmul":{"tf32":-1}}}`, "flops.batched_matmul.tf32 must not be negative"},
		{`"class_overhead":{"batched_matmul":-1}}`, "class_overhead.batched_matmul must not be negative"},
		{`"class_overhead":{"reduce":-1}}`, "class_overhead.reduce must not be negative"},
		{`"flops":{"tensor":{}}}`, `unknown field "tensor"`},
		{`"flops":{"vector":{"fp8":1}}}`, `unknown field "fp8"`},
		{`"collectives":[{"kind":"broadcast","devices":2,"alpha":1,"beta":1}]}`, `unknown collective "broadcast"`},
		{`"collectives":[{"kind":"slice","devices":2,"alpha":1,"beta":1}]}`, "collectives[0]: kind must be"},
		{`"collectives":[{"kind":"all_reduce","devices":3,"alpha":1,"beta":1}]}`, "devices must be 2 to the 2 devices per host, got 3"},
		{`"collectives":[{"kind":"all_reduce","devices":2,"alpha":-1,"beta":1}]}`, "collectives[0].alpha must not be negative"},
		{`"collectives":[{"kind":"all_reduce","devices":2,"alpha":1,"beta":1},{"kind":"all_reduce","devices":2,"alpha":1,"beta":1}]}`, "collectives[1]: a second fit"},
	} {
		_, err := ParseClusterJSON([]byte(base+tc.edit), "")
		require.Error(t, err, tc.edit)
		assert.Contains(t, err.Error(), tc.want, tc.edit)
	}
}

// A device alone has every core for its contractions and one for its vector work; GPUs
// (HostCores 0) never share.
func TestSharing(t *testing.T) {
	c := &Cluster{HostCores: 2}
	assert.Equal(t, 1.0, c.Sharing(ClassMatmul, 1))
	assert.Equal(t, 2.0, c.Sharing(ClassMatmul, 2))
	assert.Equal(t, 4.0, c.Sharing(ClassConv, 4))
	assert.Equal(t, 1.0, c.Sharing(ClassVector, 2))
	assert.Equal(t, 2.0, c.Sharing(ClassVector, 4))
	assert.Equal(t, 1.0, (&Cluster{}).Sharing(ClassMatmul, 8))
	// A Gemm that does not split (speedup 1) slows only when devices outnumber cores; one
	// that splits 1.5× on 2 cores: alone 1.5 cores' worth, with 4 devices half a core.
	c.ContractionSpeedup = 1
	assert.Equal(t, 1.0, c.Sharing(ClassMatmul, 2))
	assert.Equal(t, 2.0, c.Sharing(ClassMatmul, 4))
	c.ContractionSpeedup = 1.5
	assert.Equal(t, 1.5, c.Sharing(ClassMatmul, 2))
	assert.Equal(t, 3.0, c.Sharing(ClassMatmul, 4))
	m, err := NewLogicalMesh(mustCluster(t, "dgx-a100:2"), Submesh{Hosts: 2, Devices: 8}, 2, 8)
	require.NoError(t, err)
	assert.Equal(t, 8, m.HostDevices())
	u, err := NewUniformMesh(2, 2, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, 4, u.HostDevices())
}
