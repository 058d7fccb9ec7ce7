package render

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGraphGolden(t *testing.T) {
	for _, c := range planCases {
		p := compilePlan(t, c)
		for _, ops := range []bool{false, true} {
			name := c.name + "-layers.dot"
			if ops {
				name = c.name + "-ops.dot"
			}
			t.Run(name, func(t *testing.T) {
				g, err := Graph(p, Options{Ops: ops})
				require.NoError(t, err)
				golden(t, name, g.String())
			})
		}
	}
}
