package units

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0 s"},
		{1.5, "1.5 s"},
		{5400, "5400 s"},
		{2.12e-3, "2.12 ms"},
		{471.2e-6, "471 µs"},
		{2.76e-9, "2.76 ns"},
		{1.76e-12, "0.00176 ns"},
		{-3e-3, "-3 ms"},
		{0.0009996, "1 ms"},
		{math.NaN(), "NaN s"},
		{math.Inf(1), "+Inf s"},
	} {
		assert.Equal(t, c.want, Seconds(c.in), "Seconds(%g)", c.in)
	}
}

func TestBytes(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{117312, "114.6 KiB"},
		{8 << 30, "8.0 GiB"},
		{3 << 50, "3.0 PiB"},
		{math.MaxInt64, "8.0 EiB"},
		{-2048, "-2.0 KiB"},
	} {
		assert.Equal(t, c.want, Bytes(c.in), "Bytes(%d)", c.in)
	}
	assert.Equal(t, "1.5 KiB", BytesF(1536.4))
	assert.Equal(t, "NaN B", BytesF(math.NaN()))
}

func TestFLOPs(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{0, "0 FLOP"},
		{512, "512 FLOP"},
		{29400, "29.4 kFLOP"},
		{1.2e9, "1.2 GFLOP"},
		{999.7e3, "1 MFLOP"},
		{3.14e18, "3.14 EFLOP"},
	} {
		assert.Equal(t, c.want, FLOPs(c.in), "FLOPs(%g)", c.in)
	}
}

func TestFLOPRate(t *testing.T) {
	assert.Equal(t, "125 TFLOP/s", FLOPRate(125e12))
	assert.Equal(t, "0.00287 TFLOP/s", FLOPRate(2.865e9))
	assert.Equal(t, "0 TFLOP/s", FLOPRate(0))
}
