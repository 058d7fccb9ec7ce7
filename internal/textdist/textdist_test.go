package textdist

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b     string
		bound, d int
	}{
		{"", "", 0, 0}, {"abc", "", 0, 3}, {"kitten", "sitting", 0, 3}, {"l0.fc", "l1.fc", 0, 1},
		{"relu", "relu", 0, 0},
		{"kitten", "sitting", 2, 2}, // stops at the bound
		{"kitten", "sitting", 4, 3},
	} {
		assert.Equal(t, tc.d, Distance(tc.a, tc.b, tc.bound), "%q %q bound %d", tc.a, tc.b, tc.bound)
	}
}

func TestClosest(t *testing.T) {
	assert.Equal(t, []string{"l0.fc", "l1.fc", "l0.relu"}, Closest("l0.fc", []string{"l0.relu", "l1.fc", "l0.fc", "zzzzzzzz"}, 3))
	assert.Empty(t, Closest("x", nil, 3))
}
