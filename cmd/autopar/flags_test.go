package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
)

// TestFlagsAgree walks every command's flags: each has a usage line, and a flag name means
// the same kind of value wherever it appears, so that what a user learns on one command
// holds on the others.
func TestFlagsAgree(t *testing.T) {
	// Names that deliberately mean another thing on one command, with the reason.
	exceptions := map[string]string{
		"explain --memory": "explain's modes (--op, --stage, --memory) are switches, not sizes",
	}
	kinds := map[string]string{} // flag name -> "type (command)"
	for _, cmd := range newRoot().Commands() {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			where := cmd.Name() + " --" + f.Name
			assert.NotEmpty(t, strings.TrimSpace(f.Usage), "%s has no usage line", where)
			if f.Deprecated != "" || exceptions[where] != "" {
				return
			}
			kind := f.Value.Type()
			if prev, ok := kinds[f.Name]; ok {
				assert.Equal(t, strings.Fields(prev)[0], kind, "--%s is %s on %s", f.Name, kind, where)
				return
			}
			kinds[f.Name] = kind + " (" + cmd.Name() + ")"
		})
	}
	// A shorthand stands for the same long flag on every command (-o is --output).
	long := map[string]string{}
	for _, cmd := range newRoot().Commands() {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Shorthand == "" {
				return
			}
			if prev, ok := long[f.Shorthand]; ok {
				assert.Equal(t, prev, f.Name, "-%s is --%s on %s", f.Shorthand, f.Name, cmd.Name())
				return
			}
			long[f.Shorthand] = f.Name
		})
	}
	for _, renamed := range []string{"memory-budget"} {
		for _, cmd := range newRoot().Commands() {
			if f := cmd.Flags().Lookup(renamed); f != nil {
				assert.NotEmpty(t, f.Deprecated, "%s --%s: the old name must be marked deprecated", cmd.Name(), renamed)
			}
		}
	}
}

// TestHelpGoesToStdout: every command's --help, model's per-model help included, prints on
// stdout, exits 0 and says nothing on stderr.
func TestHelpGoesToStdout(t *testing.T) {
	args := [][]string{{"--help"}, {"--version"}, {"model", "gpt", "--help"}, {"model", "--help"}}
	for _, cmd := range newRoot().Commands() {
		if cmd.Name() != "help" && cmd.Name() != "completion" {
			args = append(args, []string{cmd.Name(), "--help"})
		}
	}
	for _, a := range args {
		var out, errs bytes.Buffer
		code := cli(a, &out, &errs)
		assert.Equal(t, 0, code, "%v", a)
		assert.Empty(t, errs.String(), "%v wrote to stderr", a)
		assert.NotEmpty(t, out.String(), "%v wrote nothing to stdout", a)
	}
	var out, errs bytes.Buffer
	assert.Equal(t, 0, cli([]string{"model", "gpt", "--help"}, &out, &errs))
	assert.Contains(t, out.String(), "--tied", "model gpt --help lists its knobs")
}
