package mesh

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPresetsValidate(t *testing.T) {
	require.Equal(t, []string{"cpu", "dgx-a100", "dgx-h100", "p3.16xlarge"}, Presets())
	for _, name := range Presets() {
		c, err := Preset(name)
		require.NoError(t, err, name)
		assert.NoError(t, c.Validate(), name)
		assert.Equal(t, name, c.Name)
		assert.Equal(t, 1, c.Hosts, name)
	}
}

func TestPresetNumbers(t *testing.T) {
	a, err := Preset("dgx-a100")
	require.NoError(t, err)
	assert.Equal(t, 312e12, a.DeviceFLOPS)
	assert.Equal(t, int64(80<<30), a.DeviceMemoryBytes)
	assert.Equal(t, 300e9, a.IntraHostBandwidth)
	assert.Equal(t, 200e9, a.InterHostBandwidth, "8 × 200 Gb/s per host")
	assert.Equal(t, 25e9, a.InterHostBandwidthPerDevice())
	h, err := Preset("dgx-h100")
	require.NoError(t, err)
	assert.Equal(t, 989e12, h.DeviceFLOPS)
	assert.Equal(t, 450e9, h.IntraHostBandwidth)
	assert.Equal(t, 400e9, h.InterHostBandwidth)
	p, err := Preset("p3.16xlarge")
	require.NoError(t, err)
	assert.Equal(t, 125e12, p.DeviceFLOPS)
	assert.Equal(t, 25e9/8, p.InterHostBandwidth, "25 Gb/s per host")
	assert.InDelta(t, 125e12*0.5, p.EffectiveFLOPS(), 1)
	assert.InDelta(t, 2.0, p.ComputeTime(125e12), 1e-12)
}

func TestParseCluster(t *testing.T) {
	for _, tc := range []struct {
		arg            string
		name           string
		hosts, devices int
	}{
		{"dgx-a100", "dgx-a100", 1, 8},
		{"dgx-a100:16", "dgx-a100", 16, 8},
		{"dgx-h100:2", "dgx-h100", 2, 8},
		{"p3.16xlarge:4", "p3.16xlarge", 4, 8},
		{"cpu", "cpu", 1, 4},
		{"cpu:8", "cpu", 1, 8},
	} {
		c, err := ParseCluster(tc.arg)
		require.NoError(t, err, tc.arg)
		assert.Equal(t, tc.name, c.Name, tc.arg)
		assert.Equal(t, tc.hosts, c.Hosts, tc.arg)
		assert.Equal(t, tc.devices, c.DevicesPerHost, tc.arg)
	}
}

func TestParseClusterErrors(t *testing.T) {
	_, err := ParseCluster("tpu-v4")
	assert.EqualError(t, err, `mesh: unknown cluster preset "tpu-v4" (known: cpu, dgx-a100, dgx-h100, p3.16xlarge)`)
	_, err = ParseCluster("dgx-a100:0")
	assert.ErrorContains(t, err, "count after ':' must be a positive integer")
	_, err = ParseCluster("cpu:x")
	assert.ErrorContains(t, err, `got "x"`)
	_, err = ParseCluster("missing.json")
	assert.ErrorContains(t, err, "missing.json")
}

func TestClusterJSONRoundTrip(t *testing.T) {
	for _, name := range Presets() {
		c, err := ParseCluster(name + ":3")
		require.NoError(t, err)
		data, err := json.Marshal(c)
		require.NoError(t, err)
		var back Cluster
		require.NoError(t, json.Unmarshal(data, &back))
		assert.Equal(t, *c, back)
		again, err := json.Marshal(&back)
		require.NoError(t, err)
		assert.Equal(t, string(data), string(again), "byte-identical")
	}
}

func TestLoadCluster(t *testing.T) {
	dir := t.TempDir()
	c, err := Preset("dgx-a100")
	require.NoError(t, err)
	c.Name, c.Hosts = "", 2
	data, err := json.MarshalIndent(c, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(dir, "mycluster.json")
	require.NoError(t, os.WriteFile(path, data, 0o644))

	got, err := ParseCluster(path)
	require.NoError(t, err)
	assert.Equal(t, "mycluster", got.Name, "named after the file")
	assert.Equal(t, 16, got.Devices())

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"hosts": 1, "devcies_per_host": 8}`), 0o644))
	_, err = LoadCluster(bad)
	assert.ErrorContains(t, err, `unknown field "devcies_per_host"`)

	require.NoError(t, os.WriteFile(bad, append(data, []byte(`{}`)...), 0o644))
	_, err = LoadCluster(bad)
	assert.ErrorContains(t, err, "trailing data")
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Cluster)
		want string
	}{
		{func(c *Cluster) { c.Hosts = 0 }, "hosts must be positive, got 0"},
		{func(c *Cluster) { c.DevicesPerHost = -1 }, "devices per host must be positive, got -1"},
		{func(c *Cluster) { c.DeviceMemoryBytes = 0 }, "device memory bytes must be positive, got 0"},
		{func(c *Cluster) { c.DeviceFLOPS = math.NaN() }, "device FLOP/s must be finite, got NaN"},
		{func(c *Cluster) { c.DeviceMemoryBandwidth = 0 }, "device memory bandwidth must be positive, got 0"},
		{func(c *Cluster) { c.IntraHostBandwidth = -5 }, "intra-host bandwidth must be positive, got -5"},
		{func(c *Cluster) { c.IntraHostLatency = -1e-6 }, "intra-host latency must not be negative, got -1e-06"},
		{func(c *Cluster) { c.InterHostBandwidth = -1 }, "inter-host bandwidth must be positive, got -1"},
		{func(c *Cluster) { c.InterHostBandwidth = 0 }, "inter-host bandwidth must be positive, got 0"},
		{func(c *Cluster) { c.InterHostLatency = math.Inf(1) }, "inter-host latency must be finite, got +Inf"},
		{func(c *Cluster) { c.Efficiency = 0 }, "efficiency must be in (0, 1], got 0"},
		{func(c *Cluster) { c.Efficiency = 1.5 }, "efficiency must be in (0, 1], got 1.5"},
	} {
		c, err := ParseCluster("dgx-a100:2")
		require.NoError(t, err)
		c.Name = "x"
		tc.edit(c)
		assert.EqualError(t, c.Validate(), `mesh: cluster "x": `+tc.want)
	}
}

func TestSingleHostMayOmitInterHost(t *testing.T) {
	c, err := Preset("cpu")
	require.NoError(t, err)
	c.InterHostBandwidth, c.InterHostLatency = 0, 0
	assert.NoError(t, c.Validate())
	c.Hosts = 2
	assert.ErrorContains(t, c.Validate(), "inter-host bandwidth must be positive")
}

func TestCountDevicesNeverWraps(t *testing.T) {
	n, ok := CountDevices(16, 8)
	assert.True(t, ok)
	assert.Equal(t, 128, n)
	n, ok = CountDevices()
	assert.True(t, ok)
	assert.Equal(t, 1, n)
	_, ok = CountDevices(MaxDevices, 1)
	assert.True(t, ok)
	for _, counts := range [][]int{
		{MaxDevices, 2},
		{1 << 32, 1 << 32},                // wraps to 0 in 64 bits
		{2305843009213693953, 8},          // wraps to 8 in 64 bits
		{math.MaxInt64, math.MaxInt64, 3}, // wraps in both halves
		{-1, 8},
	} {
		_, ok := CountDevices(counts...)
		assert.False(t, ok, "%v", counts)
	}
}

func TestValidateRefusesWrappedDeviceCount(t *testing.T) {
	c, err := Preset("p3.16xlarge")
	require.NoError(t, err)
	c.Hosts = 2305843009213693953 // × 8 wraps to 8 in 64 bits
	assert.ErrorContains(t, c.Validate(), "2305843009213693953 hosts × 8 devices per host is more than the 2147483647 devices a cluster may have")
	_, err = ParseCluster("p3.16xlarge:200000000")
	assert.NoError(t, err, "1.6e9 devices fit a DeviceID; the CLI's --max-devices refuses it")
	_, err = ParseCluster("p3.16xlarge:300000000")
	assert.ErrorContains(t, err, "more than the 2147483647 devices")
	c.Hosts = 1
	c.DeviceMemoryBytes = 1<<60 + 1
	assert.ErrorContains(t, c.Validate(), "device memory bytes 1152921504606846977 is more than 1 EiB")
	_, err = ParseClusterJSON([]byte(`{"hosts": 1, "devices_per_host": 8, "device_memory_bytes": 1e30}`), "x")
	assert.ErrorContains(t, err, "device_memory_bytes")
}

func TestLoadClusterBoundsWhatItReads(t *testing.T) {
	_, err := LoadCluster("/dev/zero")
	assert.EqualError(t, err, "mesh: cluster spec /dev/zero: larger than 1 MiB, the most a cluster spec may hold")
}
