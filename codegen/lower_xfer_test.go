package codegen

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
)

// Every element crosses between the meshes exactly once, and each receiver's pieces tile
// its block of the landing layout.
func TestTransferPiecesCrossOnce(t *testing.T) {
	at := func(n0, n1, first int) *mesh.LogicalMesh {
		m, err := mesh.NewUniformMesh(n0, n1, 1, 1)
		require.NoError(t, err)
		for i := range m.Devices {
			m.Devices[i] += mesh.DeviceID(first)
		}
		return m
	}
	cases := []struct {
		src, dst   *mesh.LogicalMesh
		s, t       string
		shape      []int
		wantPieces int
	}{
		{at(1, 2, 0), at(1, 2, 2), "S1R", "S1R", []int{8, 4}, 2},
		{at(1, 2, 0), at(2, 1, 2), "S1R", "RS0", []int{8, 4}, 4},
		{at(2, 2, 0), at(1, 4, 4), "S0S1", "RR", []int{8, 8}, 8},
		{at(1, 4, 0), at(2, 2, 4), "RS1", "S0R", []int{6, 8}, 8},
		{at(1, 2, 0), at(1, 3, 2), "S1", "R", []int{6}, 4},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s->%s", c.s, c.t), func(t *testing.T) {
			r := absorb(c.dst, c.shape, mesh.MustParseSpec(c.t))
			pieces, grids := transferPieces(c.src, mesh.MustParseSpec(c.s), c.dst, r, c.shape)
			local, err := c.dst.LocalShape(c.shape, r)
			require.NoError(t, err)
			total, n := 0, 0
			for d, ps := range pieces {
				block := 0
				cells := 1
				for _, g := range grids[d] {
					cells *= g
				}
				require.Len(t, ps, cells)
				for _, p := range ps {
					vol := 1
					for _, e := range p.ext {
						vol *= e
					}
					block += vol
				}
				want := 1
				for _, e := range local {
					want *= e
				}
				require.Equal(t, want, block, "receiver %d's pieces do not tile its block", d)
				total += block
				n += len(ps)
			}
			all := 1
			for _, e := range c.shape {
				all *= e
			}
			require.Equal(t, all, total, "elements crossing")
			require.Equal(t, c.wantPieces, n)
		})
	}
}
