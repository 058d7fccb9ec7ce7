package mesh

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allAxisSets = []AxisSet{AxesNone, Axis0, Axis1, AxesBoth}

// validSpecs2D lists every valid spec of a 2-D tensor on a 2-D mesh; with
// partials when withPartial.
func validSpecs2D(withPartial bool) []Spec {
	var out []Spec
	for _, p := range allAxisSets {
		if p != AxesNone && !withPartial {
			continue
		}
		for _, a := range allAxisSets {
			for _, b := range allAxisSets {
				s := Spec{Dims: []AxisSet{a, b}, Partial: p}
				if s.Validate() == nil {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func TestSpecStringParseRoundTrip(t *testing.T) {
	specs := validSpecs2D(true)
	require.Len(t, specs, 16, "each axis on dim 0, dim 1, partial or unused")
	specs = append(specs, Spec{}, Spec{Partial: Axis1}, MustParseSpec("S0RS1"))
	for _, s := range specs {
		back, err := ParseSpec(s.String())
		require.NoError(t, err, s.String())
		assert.True(t, s.Equal(back), "%s → %s", s, back)
		assert.Equal(t, s.String(), back.String())
	}
	for text, want := range map[string]string{
		"S0R": "S0R", "RS1": "RS1", "S01R": "S01R", "RR+P1": "RR+P1", "RS0+P1": "RS0+P1",
		"": "", "+P01": "+P01", "RRR": "RRR",
	} {
		s, err := ParseSpec(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, s.String())
	}
}

func TestParseSpecErrors(t *testing.T) {
	for text, want := range map[string]string{
		"S2":       `expected R, S0, S1 or S01 at "S2"`,
		"rr":       `expected R, S0, S1 or S01 at "rr"`,
		"S0S0":     "dim 1 reuses a mesh axis",
		"S01S1":    "dim 1 reuses a mesh axis",
		"S0R+P0":   "reuses a mesh axis",
		"RR+P":     "partial must be +P0, +P1 or +P01",
		"RR+P2":    "partial must be +P0, +P1 or +P01",
		"RR+P0+P1": "partial must be",
	} {
		_, err := ParseSpec(text)
		assert.ErrorContains(t, err, want, text)
	}
}

func TestSpecJSON(t *testing.T) {
	data, err := json.Marshal(map[string]Spec{"w": MustParseSpec("S0R+P1")})
	require.NoError(t, err)
	assert.Equal(t, `{"w":"S0R+P1"}`, string(data))
	var back map[string]Spec
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, "S0R+P1", back["w"].String())
}

func TestLocalShape(t *testing.T) {
	m, err := NewUniformMesh(2, 4, 1, 1)
	require.NoError(t, err)
	for spec, want := range map[string][]int{
		"RR": {16, 8}, "S0R": {8, 8}, "RS1": {16, 2}, "S01R": {2, 8}, "S1S0": {4, 4}, "RR+P01": {16, 8},
	} {
		got, err := m.LocalShape([]int{16, 8}, MustParseSpec(spec))
		require.NoError(t, err, spec)
		assert.Equal(t, want, got, spec)
	}
	b, err := m.LocalBytes([]int{16, 8}, 4, MustParseSpec("S01R"))
	require.NoError(t, err)
	assert.Equal(t, int64(2*8*4), b)

	off, err := m.LocalOffsets([]int{16, 8}, MustParseSpec("S01R"), 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []int{(1*4 + 2) * 2, 0}, off, "S01: block i*n1+j")
	off, err = m.LocalOffsets([]int{16, 8}, MustParseSpec("S1S0"), 1, 3)
	require.NoError(t, err)
	assert.Equal(t, []int{12, 4}, off)
}

func TestLocalShapeNotDivisible(t *testing.T) {
	m, err := NewUniformMesh(2, 4, 1, 1)
	require.NoError(t, err)
	_, err = m.LocalShape([]int{16, 6}, MustParseSpec("RS1"))
	var nd *NotDivisibleError
	require.True(t, errors.As(err, &nd))
	assert.Equal(t, NotDivisibleError{Dim: 1, Size: 6, Axes: Axis1, Shards: 4}, *nd)
	assert.EqualError(t, err, "mesh: dim 1 of size 6 cannot be split on mesh axis 1 into 4 shards")
	_, err = m.LocalShape([]int{4, 6}, MustParseSpec("S01R"))
	assert.EqualError(t, err, "mesh: dim 0 of size 4 cannot be split on mesh axes 0 and 1 into 8 shards")
	_, err = m.LocalShape([]int{4}, MustParseSpec("S01R"))
	assert.EqualError(t, err, "mesh: spec S01R has 2 dims, shape [4] has 1")
}
