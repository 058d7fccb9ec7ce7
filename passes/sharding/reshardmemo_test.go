package sharding

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/mesh"
)

// TestReshardMemoSources: the memo's per-source searches (ReshardMemo.price) answer every
// (type, from, to) with exactly mesh.ReshardCost's Reshard or error, asked in an order
// that interleaves types of the same rank and specs (so that an entry shared by two
// types, or by two sources, would answer one of them wrongly); one search is kept per
// (type, from) that divides, and a nil memo answers the same. Key the searches by the
// source layout alone and it fails.
func TestReshardMemoSources(t *testing.T) {
	lm, err := mesh.NewUniformMesh(2, 4, 1e-5, 1e-10)
	require.NoError(t, err)
	types := []struct {
		typ   string
		shape []int
		elem  int
	}{{"f32[8,4]", []int{8, 4}, 4}, {"f16[8,4]", []int{8, 4}, 2}, {"f32[4,8]", []int{4, 8}, 4}, {"f32[16,6]", []int{16, 6}, 4}}
	var specs []mesh.Spec
	for p0 := -2; p0 < 2; p0++ {
		for p1 := -2; p1 < 2; p1++ {
			s := mesh.Replicated(2)
			for a, p := range []int{p0, p1} {
				switch {
				case p == -1:
					s.Partial |= 1 << a
				case p >= 0:
					s.Dims[p] |= 1 << a
				}
			}
			specs = append(specs, s)
		}
	}
	memo := &ReshardMemo{}
	sources := map[srcKey]bool{}
	for _, to := range specs {
		for _, from := range specs {
			for _, ty := range types {
				k := reshardKey{ty.typ, specBits(from), specBits(to)}
				name := fmt.Sprintf("%s: %s → %s", ty.typ, from, to)
				want, wantErr := mesh.ReshardCost(lm, ty.shape, ty.elem, from, to)
				for _, m := range []*ReshardMemo{memo, nil} {
					got, err := m.price(lm, ty.shape, ty.elem, k, from, to)
					if wantErr != nil {
						require.EqualError(t, err, wantErr.Error(), name)
						continue
					}
					require.NoError(t, err, name)
					require.Equal(t, want, got, name)
				}
				if _, err := lm.LocalShape(ty.shape, from); err == nil {
					sources[srcKey{ty.typ, k.from}] = true
				}
			}
		}
	}
	require.Len(t, memo.srcs, len(sources))
}
