package program_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/codegen"
	"github.com/autopar/autopar/program"
)

// FuzzProgramJSON feeds arbitrary bytes to UnmarshalProgram and Validate: neither may
// panic, hang or allocate beyond the input's size (Validate never expands the schedule),
// String never panics, and a program that validates round-trips through its JSON form and
// can be predicted (codegen.Predict; an external test, so it may import codegen). Seeds: the committed JSON goldens (a flat program and one in the loop
// form) and testdata/fuzz/FuzzProgramJSON.
func FuzzProgramJSON(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "*.json.golden"))
	require.NoError(f, err)
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		require.NoError(f, err)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := program.UnmarshalProgram(data)
		if err != nil {
			return
		}
		_ = p.String()
		if p.Validate() != nil {
			return
		}
		out, err := p.MarshalJSON()
		require.NoError(t, err)
		back, err := program.UnmarshalProgram(out)
		require.NoError(t, err)
		require.NoError(t, back.Validate(), "a valid program's JSON does not validate")
		require.Equal(t, p.String(), back.String())
		again, err := back.MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), "the JSON form is not byte-stable")
		codegen.Predict(nil, []*program.Program{p})
	})
}
