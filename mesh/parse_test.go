package mesh

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBytes(t *testing.T) {
	for s, want := range map[string]int64{
		"1": 1, "512B": 512, "16GiB": 16 << 30, "16Gi": 16 << 30, "16G": 16e9, "16GB": 16e9, "1.5Ki": 1536,
		"2e9": 2e9, "8 GiB": 8 << 30, " 4Mi ": 4 << 20, "1kB": 1000, "4Pi": 4 << 50, "0.4": 0, "1.6": 2,
		"4096Pi": MaxBytes, "9223372036854775807B": 0,
	} {
		got, err := ParseBytes(s)
		if want == 0 {
			require.Error(t, err, s)
			assert.Contains(t, err.Error(), `"`+s+`"`)
			continue
		}
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "0", "-1", "+1", "NaN", "Inf", "0x10", "1_000", "16gb", "16XB", "16GiBs", "16BB",
		"1e400", "1e-400", ".5", "5.", "1,5G", "16 G iB", "4097Pi", "99999999999999999999"} {
		_, err := ParseBytes(s)
		require.Error(t, err, s)
		assert.Contains(t, err.Error(), `size "`+s+`"`)
	}
}

func TestParseShape(t *testing.T) {
	for s, want := range map[string][2]int{"2x4": {2, 4}, "1X8": {1, 8}, "02x1": {2, 1}, "46340x46340": {46340, 46340}} {
		a, b, err := ParseShape(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, [2]int{a, b}, s)
	}
	for s, msg := range map[string]string{"": "expected N0xN1", "2": "expected N0xN1", "2x": "expected N0xN1",
		"x2": "expected N0xN1", "-1x2": "expected N0xN1", "+1x2": "expected N0xN1", "0x2": "expected positive",
		"2x0": "expected positive", "2x4x8": "expected N0xN1", " 2x4": "expected N0xN1", "2.0x4": "expected N0xN1",
		"65536x65536": "more than 2147483647 devices", "99999999999999999999x1": "more than"} {
		_, _, err := ParseShape(s)
		require.Error(t, err, s)
		assert.Contains(t, err.Error(), `mesh shape "`+s+`": `+msg)
	}
}
