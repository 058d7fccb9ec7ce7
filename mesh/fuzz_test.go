package mesh

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fuzz targets of the mesh package's input formats. Run one with
//
//	go test ./mesh -run '^$' -fuzz '^FuzzClusterJSON$' -fuzztime 10m
//
// (make fuzz runs every target of the repository in turn). Seeds are added here and in
// testdata/fuzz/<target>; crashers the fuzzer finds land there too and rerun in every go test.

// FuzzClusterJSON holds ParseClusterJSON to its contract: on any input it returns an error
// or a cluster that validates, whose device count is the exact product of its hosts and
// devices per host (no wrap-around), and that marshals to JSON reading back equal.
func FuzzClusterJSON(f *testing.F) {
	for _, name := range Presets() {
		c, err := Preset(name)
		require.NoError(f, err)
		data, err := json.Marshal(c)
		require.NoError(f, err)
		f.Add(data)
	}
	for _, s := range []string{
		`{}`, `{"hosts":2}`, `{"name":"x","hosts":1,"devices_per_host":1,"device_flops":1,"device_memory_bytes":1,` +
			`"device_memory_bandwidth":1,"intra_host_bandwidth":1,"efficiency":1}`,
		`{"hosts":4294967296,"devices_per_host":4294967296}`,
		`{"name":"x","hosts":1,"devices_per_host":2,"device_flops":1,"device_memory_bytes":1,"device_memory_bandwidth":1,` +
			`"intra_host_bandwidth":1,"efficiency":1,"flops":{"matmul":{"f32":1,"tf32":2,"f16":3},"vector":{}},"tf32":true,"host_cores":2,"contraction_speedup":1.5,` +
			`"kernel_overhead":1e-6,"collectives":[{"kind":"all_to_all","devices":2,"alpha":1e-5,"beta":1e-9}]}`,
		`{"name":"x","hosts":1,"devices_per_host":1,"device_flops":1,"device_memory_bytes":1,"device_memory_bandwidth":1,` +
			`"intra_host_bandwidth":1,"efficiency":1,"flops":{"batched_matmul":{"f32":1},"reduce":{"f16":2}},` +
			`"class_overhead":{"batched_matmul":1e-6,"reduce":-1}}`,
		`{"collectives":[],"flops":{}}`, `{"efficiency":1e999}`, `[1,2]`, `null`, `{"hosts":1}{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseClusterJSON(data, "fuzz")
		if err != nil {
			require.Nil(t, c)
			require.NotEmpty(t, err.Error())
			return
		}
		require.NoError(t, c.Validate())
		hi, lo := bits.Mul64(uint64(c.Hosts), uint64(c.DevicesPerHost))
		require.True(t, hi == 0 && lo == uint64(c.Devices()) && c.Devices() >= 1,
			"%d hosts × %d devices wrapped to %d", c.Hosts, c.DevicesPerHost, c.Devices())
		out, err := json.Marshal(c)
		require.NoError(t, err)
		back, err := ParseClusterJSON(out, "fuzz")
		require.NoError(t, err, "%s", out)
		require.Equal(t, c, back)
	})
}

// FuzzFlagValues holds the strict parsers of --mesh (ParseShape), byte sizes (ParseBytes)
// and --cluster PRESET:N (ParseCluster) to their contract on any string: an error quotes
// the value; a success is in range and its canonical form reads back the same.
func FuzzFlagValues(f *testing.F) {
	for _, s := range []string{"2x4", "1X8", "0x4", "2x", "x", "-2x4", "+2x4", "2x4x8", " 2x4", "65536x65536",
		"16GiB", "16Gi", "1.5G", "2e9", "512B", "1", "0", "-1", "NaN", "Inf", "0x10", "16 GiB", "16gb", "1e400",
		"4Pi", "9223372036854775807", "0.4", "1e-400", "cpu:8", "dgx-a100:16", "p3.16xlarge", "cpu:0", "cpu:+2",
		"dgx-h100:2.5", "dgx-a100:99999999999", "cpu:2147483648"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n0, n1, err := ParseShape(s); err != nil {
			require.Contains(t, err.Error(), fmt.Sprintf("%q", s))
		} else {
			require.True(t, n0 >= 1 && n1 >= 1 && int64(n0)*int64(n1) <= MaxMeshDevices, "%q gave %dx%d", s, n0, n1)
			a, b, err := ParseShape(fmt.Sprintf("%dx%d", n0, n1))
			require.NoError(t, err)
			require.Equal(t, [2]int{n0, n1}, [2]int{a, b})
		}
		if n, err := ParseBytes(s); err != nil {
			require.Contains(t, err.Error(), fmt.Sprintf("%q", s))
		} else {
			require.True(t, n >= 1 && n <= MaxBytes, "%q gave %d bytes", s, n)
			back, err := ParseBytes(strconv.FormatInt(n, 10) + "B")
			require.NoError(t, err)
			require.Equal(t, n, back)
		}
		// Only the preset form: a name with '/' or ".json" is a file to read, not fuzzed here.
		if strings.ContainsAny(s, `/\`) || strings.HasSuffix(s, ".json") {
			return
		}
		if c, err := ParseCluster(s); err == nil {
			require.NoError(t, c.Validate())
			hi, lo := bits.Mul64(uint64(c.Hosts), uint64(c.DevicesPerHost))
			require.True(t, hi == 0 && lo == uint64(c.Devices()) && c.Devices() >= 1, "%q: %v", s, c)
		} else {
			require.NotEmpty(t, err.Error())
		}
	})
}

// FuzzParseSpec holds ParseSpec to its contract: it accepts exactly what String writes, so
// a spec it returns validates and prints back to the input, and UnmarshalText agrees.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"", "R", "S0", "S1", "S01", "S0R", "RS01", "RR+P1", "+P0", "+P01", "S0S0", "S0+P0",
		"S01+P1", "RS1S0", "S2", "+P", "+P10", "R+P0+P1", "s0", "S0 R"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSpec(text)
		var u Spec
		uerr := u.UnmarshalText([]byte(text))
		if err != nil {
			require.Error(t, uerr)
			require.Contains(t, err.Error(), fmt.Sprintf("%q", text))
			return
		}
		require.NoError(t, uerr)
		require.True(t, s.Equal(u))
		require.NoError(t, s.Validate())
		require.Equal(t, text, s.String())
		back, err := ParseSpec(s.String())
		require.NoError(t, err)
		require.True(t, s.Equal(back))
	})
}
