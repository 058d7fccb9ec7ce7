package render

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLayerBlocks(t *testing.T) {
	assert.Equal(t, "l0.mlp", blockOf("l0.mlp.w1.einsum"))
	assert.Equal(t, "l0.res1", blockOf("l0.res1"))
	assert.Equal(t, "embed", blockOf("embed"))

	n := &layerNode{}
	assert.Equal(t, "backward only", n.blockRange())
	for _, v := range []string{"l0.mlp.w2", "l0.res2", "l1.ln1.layer_norm", "l1.attn.q", "l1.attn.k"} {
		n.addBlock(blockOf(v))
	}
	assert.Equal(t, "l0.mlp … l1.attn", n.blockRange())
	assert.Equal(t, "l0.mlp, l0.res2", (&layerNode{blocks: []string{"l0.mlp", "l0.res2"}}).blockRange())
}
