package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var lossRE = regexp.MustCompile(`step +\d+ +loss (\S+)`)

func losses(t *testing.T, out string) []float64 {
	var ls []float64
	for _, m := range lossRE.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		ls = append(ls, v)
	}
	return ls
}

// The acceptance test of issue 2: on the small GPT the loss falls over 20 steps.
func TestTrainGPTTinyLossFalls(t *testing.T) {
	for _, opt := range []string{"sgd", "adam"} {
		var out bytes.Buffer
		err := runTrain(context.Background(), &out, "../../testdata/models/gpt-tiny.ir",
			trainFlags{steps: 20, optimizer: opt, momentum: 0.9, seed: 1})
		require.NoError(t, err, opt)
		ls := losses(t, out.String())
		require.Len(t, ls, 20, out.String())
		assert.Less(t, ls[19], 0.7*ls[0], "%s: loss should fall: %v", opt, ls)
	}
}

func TestTrainMLPTinyLossFalls(t *testing.T) {
	for _, precision := range []string{"", "mixed"} {
		var out bytes.Buffer
		err := runTrain(context.Background(), &out, "../../testdata/models/mlp-tiny.ir",
			trainFlags{steps: 10, optimizer: "sgd", momentum: 0.9, seed: 3, precision: precision})
		require.NoError(t, err)
		ls := losses(t, out.String())
		require.Len(t, ls, 10)
		assert.Less(t, ls[9], ls[0], "precision %q", precision)
	}
}

func TestTrainErrors(t *testing.T) {
	var out bytes.Buffer
	err := runTrain(context.Background(), &out, "../../testdata/models/mlp-tiny.ir", trainFlags{steps: 0})
	require.ErrorContains(t, err, "--steps must be at least 1")
	err = runTrain(context.Background(), &out, "../../testdata/models/mlp-tiny.ir", trainFlags{steps: 1, optimizer: "lamb"})
	require.ErrorContains(t, err, `unknown optimizer "lamb"`)
	err = runTrain(context.Background(), &out, "no/such.ir", trainFlags{steps: 1, optimizer: "sgd"})
	require.ErrorContains(t, err, "no such file")
}
