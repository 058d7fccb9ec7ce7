package autopar

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
)

// A quick calibration measures every rate, one fit per collective and group size, and
// writes a cluster that reads back and compiles.
func TestCalibrateQuick(t *testing.T) {
	c, err := Calibrate(context.Background(), CalibrateOptions{Devices: 4, Quick: true})
	require.NoError(t, err)
	require.NoError(t, c.Validate())
	assert.Equal(t, 4, c.DevicesPerHost)
	for _, r := range []*mesh.Rates{c.FLOPs.Matmul, c.FLOPs.Conv, c.FLOPs.Vector} {
		assert.Positive(t, r.F32)
		assert.Positive(t, r.F16)
	}
	assert.Positive(t, c.KernelOverhead)
	assert.Positive(t, c.DeviceMemoryBandwidth)
	require.NotNil(t, c.ClassOverhead)
	assert.Zero(t, c.HostCores, "a calibration prices a device as one core of its own")
	var got []string
	for _, f := range c.Collectives {
		got = append(got, f.Kind.String()+"/"+string(rune('0'+f.Devices)))
	}
	assert.Equal(t, []string{"all_reduce/2", "all_reduce/4", "all_gather/2", "all_gather/4",
		"reduce_scatter/2", "reduce_scatter/4", "all_to_all/2", "all_to_all/4"}, got)
	data, err := json.Marshal(c)
	require.NoError(t, err)
	back, err := mesh.ParseClusterJSON(data, "")
	require.NoError(t, err)
	assert.Equal(t, c, back)
	compile(t, model(t, "mlp-tiny"), back, Options{Microbatches: 1})
}

func TestCalibrateGroupSizes(t *testing.T) {
	for n, want := range map[int][]int{1: nil, 2: {2}, 3: {2, 3}, 4: {2, 4}, 6: {2, 4, 6}, 8: {2, 4, 8}} {
		assert.Equal(t, want, (&calibrator{n: n}).groupSizes(), "cpu:%d", n)
	}
	_, err := Calibrate(context.Background(), CalibrateOptions{Devices: 0})
	assert.ErrorContains(t, err, "devices must be at least 1, got 0")
}

func TestLineFit(t *testing.T) {
	a, b := lineFit([]float64{1, 2, 3}, []float64{5, 7, 9})
	assert.InDelta(t, 3, a, 1e-12)
	assert.InDelta(t, 2, b, 1e-12)
}

// The relative fit passes through exact points, and weighs a small point's relative error
// as much as a large one's: an outlier on the large point moves the intercept less than the
// plain fit does.
func TestRelativeLineFit(t *testing.T) {
	a, b := relativeLineFit([]float64{1, 2, 3}, []float64{5, 7, 9})
	assert.InDelta(t, 3, a, 1e-9)
	assert.InDelta(t, 2, b, 1e-9)
	xs, ys := []float64{0, 1, 100}, []float64{1, 2, 150}
	ar, _ := relativeLineFit(xs, ys)
	ap, _ := lineFit(xs, ys)
	assert.Less(t, math.Abs(ar-1), math.Abs(ap-1))
}
