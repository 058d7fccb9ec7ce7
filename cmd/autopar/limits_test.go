package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each input past a limit is refused fast, naming the limit and how to raise it.
func TestInputLimits(t *testing.T) {
	mlp := mlpTiny
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", "/dev/zero", "--cluster", "cpu:2"}, "/dev/zero: larger than the limit of 64 MiB on input files; raise the limit with --max-file-size"},
		{[]string{"compile", mlp, "--cluster", "cpu:2", "--max-file-size", "100B"}, "larger than the limit of 100 bytes on input files"},
		{[]string{"compile", mlp, "--cluster", "cpu:2", "--max-ops", "5"}, "mlp-tiny.ir:7:1: the model has more than 5 values, the limit; raise it with --max-ops"},
		{[]string{"compile", mlp, "--cluster", "p3.16xlarge:200000000"}, "200000000 hosts × 8 devices is 1600000000 devices, more than the limit of 65536; raise it with --max-devices"},
		{[]string{"compile", mlp, "--cluster", "p3.16xlarge:9000"}, "more than the limit of 65536; raise it with --max-devices"},
		{[]string{"compile", mlp, "--cluster", "cpu:8", "--max-devices", "4"}, "8 devices, more than the limit of 4"},
		{[]string{"compile", mlp, "--cluster", "/dev/zero"}, "cluster spec /dev/zero: larger than 1 MiB"},
		{[]string{"train", "/dev/zero"}, "raise the limit with --max-file-size"},
		{[]string{"shard", mlp, "--cluster", "cpu:8", "--mesh", "2x4", "--max-devices", "4"}, "raise it with --max-devices"},
		// no product wraps: each of these wraps to a plausible small number in 64 bits
		{[]string{"compile", mlp, "--cluster", "cpu:8", "--plan", "tp=2305843009213693953,pp=8"}, "is more than 2147483647 devices"},
		{[]string{"shard", mlp, "--cluster", "cpu:8", "--mesh", "4294967296x4294967296"}, "more than 2147483647 devices"},
		{[]string{"compile", mlp, "--cluster", "cpu:2", "--batch", "4611686018427387904"}, "--batch 4611686018427387904: expected a batch size from 1 to 2^50"},
		{[]string{"compile", mlp, "--cluster", "cpu:2", "--batch", "562949953421312", "--microbatches", "1"}, "has more than 2^50 elements"},
		{[]string{"compile", mlp, "--cluster", "p3.16xlarge:2305843009213693953"}, "more than the 2147483647 devices a cluster may have"},
	} {
		var out, errOut bytes.Buffer
		start := time.Now()
		assert.Equal(t, exitError, cli(tc.args, &out, &errOut), strings.Join(tc.args, " "))
		assert.Contains(t, errOut.String(), tc.want, strings.Join(tc.args, " "))
		assert.Less(t, time.Since(start), 10*time.Second, strings.Join(tc.args, " "))
	}
}

// Off a terminal, progress comes as lines on stderr; --quiet silences them.
func TestProgressLines(t *testing.T) {
	progressInterval = time.Millisecond
	t.Cleanup(func() { progressInterval = 5 * time.Second })
	var out bytes.Buffer
	var errOut syncBuffer
	args := []string{"compile", "../../testdata/models/gpt-tiny.ir", "--cluster", "cpu:2", "--microbatches", "2"}
	require.Equal(t, 0, cli(args, &out, &errOut), errOut.String())
	assert.Regexp(t, `(?m)^autopar: \d+s: (reading the model|building the training step and its layers|sharding ILPs \d+/\d+, 2 micro-batches|stage search \d+/\d+, 2 micro-batches)$`, errOut.String())

	var quiet syncBuffer
	require.Equal(t, 0, cli(append(args, "--quiet"), &out, &quiet))
	assert.Empty(t, quiet.String())
}

func TestProgressNilIsQuiet(t *testing.T) {
	var p *progress
	p.set(2, "x", 1, 2)
	p.setPhase("y")
	p.close()
	assert.Nil(t, startProgress(os.Stderr, true))
}

// Limits apply where a test calls a command function directly, with no flags parsed.
func TestLimitsDefaults(t *testing.T) {
	global = globalFlags{}
	big := filepath.Join(t.TempDir(), "big.ir")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(defaultMaxFileSize+1))
	require.NoError(t, f.Close())
	var out, errOut bytes.Buffer
	err = runCompile(context.Background(), &out, &errOut, big, compileFlags{cluster: "cpu:2", microbatches: "auto", schedule: "1f1b", optimizer: "sgd"})
	require.ErrorContains(t, err, "big.ir: larger than the limit of 64 MiB on input files")
}
