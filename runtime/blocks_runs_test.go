package runtime

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

// copyRuns merges the trailing dims a block covers whole into one run; every block copies
// what an element-by-element copy does.
func TestCopyRunsMergesWholeDims(t *testing.T) {
	sshape := ir.Shape{3, 4, 5}
	src := make([]float64, sshape.NumElements())
	for i := range src {
		src[i] = float64(i)
	}
	for _, c := range []struct{ off, ext []int }{
		{[]int{0, 0, 0}, []int{3, 4, 5}}, {[]int{1, 0, 0}, []int{2, 4, 5}}, {[]int{0, 1, 0}, []int{3, 2, 5}},
		{[]int{1, 2, 1}, []int{2, 2, 3}}, {[]int{0, 0, 2}, []int{3, 4, 3}}, {[]int{2, 3, 4}, []int{1, 1, 1}},
	} {
		ext := ir.Shape(c.ext)
		got := make([]float64, ext.NumElements())
		copyRuns(got, ext, make([]int, 3), src, sshape, c.off, ext)
		want := make([]float64, 0, len(got))
		for i := range c.ext[0] {
			for j := range c.ext[1] {
				for k := range c.ext[2] {
					want = append(want, src[((c.off[0]+i)*4+c.off[1]+j)*5+c.off[2]+k])
				}
			}
		}
		require.Equal(t, want, got, "%v at %v", c.ext, c.off)
	}
}
