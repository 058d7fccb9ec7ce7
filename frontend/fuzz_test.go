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
	// Edge cases of the shape rules — scalars, empty lists, extreme ints and floats — as
	// one-op files: small seeds are what the mutator explores best.
	const prelude = "param s: f32[]\nparam a: f32[2,3]\nparam img: f32[1,1,4,4]\nparam f: f32[1,1,3,3]\ninput ids: i32[2] batch=0 limit=3\n"
	for _, line := range []string{
		`x = einsum s spec="->"`, `x = einsum s, a spec=",ij->ji"`, `x = broadcast s dims=[] shape=[]`,
		`x = slice s limit=[] start=[]`, `x = transpose a perm=[1,0]`, `x = reshape s shape=[1,1,1]`,
		`x = conv2d img, f pad=[2,2]`, `x = avg_pool_grad img window=[3,3] stride=[1,1] pad=[1,1] shape=[1,1,4,4]`,
		`x = max_pool img window=[4611686018427387904,2] stride=[1,1] pad=[4611686018427387903,0]`,
		`x = scatter_add ids, a rows=3`, `x = gather a, ids`, `x = constant type=f64[] value=-inf`,
		`x = dropout a rate=0.5 seed=-9223372036854775808`, `x = cast a to=bool`, `x = concat a, a axis=1`,
		`x = neg a block=2147483647 role=adjoint of=a`,
	} {
		f.Add([]byte(prelude + line + "\noutput x\n"))
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
