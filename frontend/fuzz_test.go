package frontend

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

// FuzzParse holds Parse to its contract on any input: it never panics or hangs; on failure
// it returns a nil graph and at most maxErrors+1 positioned errors; on success the print of
// the graph parses back and prints byte-identically. Run it with
//
//	go test ./frontend -run '^$' -fuzz FuzzParse -fuzztime 5m
//
// Crashers it finds are kept in testdata/fuzz/FuzzParse and rerun by every go test.
func FuzzParse(f *testing.F) {
	// The repository's tiny models are real seeds; the large ones would only slow mutation.
	for _, pattern := range []string{"testdata/roundtrip/*.ir", "testdata/errors/*.ir", "../testdata/models/*-tiny.ir"} {
		files, err := filepath.Glob(pattern)
		require.NoError(f, err)
		for _, file := range files {
			src, err := os.ReadFile(file)
			require.NoError(f, err)
			f.Add(src)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		g, err := Parse("fuzz.ir", src)
		if err != nil {
			require.Nil(t, g, "a graph and an error")
			var list ir.ErrorList
			require.True(t, errors.As(err, &list), "want an ir.ErrorList, got %T", err)
			require.NotEmpty(t, list)
			require.LessOrEqual(t, len(list), maxErrors+1)
			for _, e := range list {
				require.True(t, e.Pos.IsValid(), "error without a position: %s", e)
				require.NotEmpty(t, e.Msg)
			}
			return
		}
		text := g.String()
		g2, err := Parse("printed.ir", []byte(text))
		require.NoError(t, err, "the print does not parse:\n%s", text)
		require.Equal(t, text, g2.String())
	})
}
