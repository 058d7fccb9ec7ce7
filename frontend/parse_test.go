package frontend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/autopar/autopar/ir"
)

// updateGolden rewrites golden files instead of comparing: UPDATE_GOLDEN=1 go test ./frontend.
var updateGolden = os.Getenv("UPDATE_GOLDEN") == "1"

// requireSameGraph compares two graphs value by value, so a round trip is checked on the
// graph and not only on its text.
func requireSameGraph(t *testing.T, want, got *ir.Graph) {
	t.Helper()
	require.Equal(t, want.Name, got.Name)
	require.Len(t, got.Values, len(want.Values))
	for i := range want.Values {
		w, g := &want.Values[i], &got.Values[i]
		require.Equal(t, w.Name, g.Name, "value %d", i)
		require.Equal(t, w.Op, g.Op, "value %s", w.Name)
		require.Equal(t, w.Args, g.Args, "value %s", w.Name)
		require.True(t, w.Type.Equal(g.Type), "value %s: %s vs %s", w.Name, w.Type, g.Type)
		require.True(t, w.Attrs.Equal(g.Attrs), "value %s: attrs differ", w.Name)
	}
	require.Len(t, got.Outputs, len(want.Outputs))
	for i := range want.Outputs {
		require.Equal(t, want.Outputs[i].Value, got.Outputs[i].Value)
	}
	require.Len(t, got.Updates, len(want.Updates))
	for i := range want.Updates {
		require.Equal(t, want.Updates[i].Target, got.Updates[i].Target)
		require.Equal(t, want.Updates[i].Value, got.Updates[i].Value)
	}
}

// checkRoundTrip parses src, prints it, parses the print and prints again: both prints must
// agree and the two graphs must be equal. It returns the first print.
func checkRoundTrip(t *testing.T, name string, src []byte) string {
	t.Helper()
	g, err := Parse(name, src)
	require.NoError(t, err)
	text := g.String()
	g2, err := Parse(name+" (printed)", []byte(text))
	require.NoError(t, err, "reparsing the print of %s:\n%s", name, text)
	require.Equal(t, text, g2.String())
	requireSameGraph(t, g, g2)
	return text
}

// TestRoundTripGolden holds the hand-written canonical files to Print(Parse(file)) == file.
func TestRoundTripGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/roundtrip/*.ir")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			require.NoError(t, err)
			text := checkRoundTrip(t, filepath.Base(file), src)
			if updateGolden {
				require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
				return
			}
			assert.Equal(t, string(src), text, "rerun with UPDATE_GOLDEN=1 if the printer changed on purpose")
		})
	}
}

// TestRoundTripCoverage checks that the round-trip files use every op of the table and
// every attribute kind, so the round trip speaks for the whole format.
func TestRoundTripCoverage(t *testing.T) {
	files, err := filepath.Glob("testdata/roundtrip/*.ir")
	require.NoError(t, err)
	ops := map[ir.Op]bool{}
	kinds := map[ir.AttrKind]bool{}
	for _, file := range files {
		g, err := ParseFile(file)
		require.NoError(t, err)
		for _, v := range g.Values {
			ops[v.Op] = true
			for _, a := range v.Attrs {
				kinds[v.Op.Def().AttrSpec(a.Name).Kind] = true
			}
		}
	}
	for _, op := range ir.AllOps() {
		assert.True(t, ops[op], "no round-trip file uses %s", op)
	}
	for k := ir.AttrInt; k <= ir.AttrType; k++ {
		assert.True(t, kinds[k], "no round-trip file has an attribute that is %s", k)
	}
}

var errorRE = regexp.MustCompile(`ERROR ("(?:[^"\\]|\\.)*")`)

// expectations reads the `# ERROR "substring"` marks of an error file, by line.
func expectations(t *testing.T, src []byte) map[int][]string {
	want := map[int][]string{}
	for i, line := range strings.Split(string(src), "\n") {
		_, comment, found := strings.Cut(line, "#")
		if !found {
			continue
		}
		for _, m := range errorRE.FindAllStringSubmatch(comment, -1) {
			s, err := strconv.Unquote(m[1])
			require.NoError(t, err, "line %d", i+1)
			want[i+1] = append(want[i+1], s)
		}
	}
	return want
}

// TestErrorFiles parses each file of testdata/errors and checks that every error lands on
// a line marked `# ERROR "substring"` whose substrings all appear in the errors of that line
// (message, position and notes), go/types style.
func TestErrorFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/errors/*.ir")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			require.NoError(t, err)
			want := expectations(t, src)
			require.NotEmpty(t, want, "an error file needs # ERROR marks")
			g, err := Parse(filepath.Base(file), src)
			require.Error(t, err)
			assert.Nil(t, g, "no half graph on error")
			var list ir.ErrorList
			require.True(t, errors.As(err, &list), "want an ir.ErrorList, got %T", err)
			got := map[int]string{}
			for _, e := range list {
				assert.Equal(t, filepath.Base(file), e.Pos.File)
				assert.Contains(t, want, e.Pos.Line, "unexpected error: %s", e)
				got[e.Pos.Line] += e.Error() + "\n"
			}
			for line, subs := range want {
				for _, s := range subs {
					assert.Contains(t, got[line], s, "line %d", line)
				}
			}
		})
	}
}

// TestParseAccepts checks inputs that are not in canonical form — comments, blank lines,
// spacing, CRLF, defaults written out, an int where a float is wanted, outputs before the
// value — against the canonical print.
func TestParseAccepts(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"empty", "", ""},
		{"only comments", "# nothing\n\n   # here\n", ""},
		{"no final newline", "param w: f32[2]\noutput w", "param w: f32[2]\noutput w\n"},
		{"crlf and tabs", "graph g\r\nparam w: f32[2]\r\n\tr = relu\tw\r\n", "graph g\nparam w: f32[2]\nr = relu w\n"},
		{"spacing", "param   w :f32[ 2 , 3 ]\nr=reduce_sum w axes = [ 0 ,1 ]\n", "param w: f32[2,3]\nr = reduce_sum w axes=[0,1]\n"},
		{"trailing comments", "param w: f32[2] # weights\nr = relu w # act\n", "param w: f32[2]\nr = relu w\n"},
		{"defaults written out", "param w: f32[2] init=\"normal\"\ninput x: f32[2] batch=-1 limit=0\n", "param w: f32[2]\ninput x: f32[2]\n"},
		{"int for a float", "param w: f32[2]\nn = layer_norm w, w, w eps=1\n", "param w: f32[2]\nn = layer_norm w, w, w eps=1.0\n"},
		{"float spellings", "c = constant type=f32[] value=+1E3\nd = constant type=f32[] value=-.5\n", "c = constant type=f32[] value=1000.0\nd = constant type=f32[] value=-0.5\n"},
		{"attrs in any order", "input x: f32[2] limit=0 batch=0\n", "input x: f32[2] batch=0\n"},
		{"output and update before the value", "output y\nupdate w <- y\nparam w: f32[2]\ny = relu w\n",
			"param w: f32[2]\ny = relu w\noutput y\nupdate w <- y\n"},
		{"graph line later", "param w: f32[2]\ngraph late\n", "graph late\nparam w: f32[2]\n"},
		{"keywords as names", "param output: f32[2]\ngraph = relu output\nupdate output <- graph\n",
			"param output: f32[2]\ngraph = relu output\nupdate output <- graph\n"},
		{"byte-order mark", "\uFEFFparam w: f32[2]\n", "param w: f32[2]\n"},
		{"escaped string", "param w: f32[2] init=\"\\x7aeros\"\n", "param w: f32[2] init=\"zeros\"\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Parse("t.ir", []byte(c.src))
			require.NoError(t, err)
			assert.Equal(t, c.want, g.String())
			checkRoundTrip(t, c.name, []byte(c.src))
		})
	}
}

// TestParseErrorText pins the full text of some diagnostics, notes included, and the
// cases an inline # ERROR mark cannot express (an unterminated string swallows the comment).
func TestParseErrorText(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unterminated string", "param w: f32[2]\ne = einsum w spec=\"i->i\n",
			"t.ir:2:19: unexpected unterminated string, want an attribute value: an int, a float, a \"string\", [ints], a dtype or a type like f32[8,512]"},
		{"shape error at the op", "param h: f32[8,512]\nparam w2: f32[1024,256]\n\n\n\n\n\n\n\n\n\n\n\n  out = matmul h, w2\n",
			"t.ir:14:9: matmul: inner dims differ: h is f32[8,512] but w2 is f32[1024,256]"},
		{"duplicate with note", "param w: f32[2]\nw = relu w\n", "t.ir:2:1: w is defined twice\n\tt.ir:1:7: note: first defined here"},
		{"cycle", "param w: f32[2]\na = add w, b\nb = add w, a\n",
			"t.ir:2:12: b is used before its definition: values must be defined on an earlier line\n\tt.ir:3:1: note: b is defined here"},
		{"errors sorted", "output zz\nparam w: f32[2]\nr = nope w\n",
			"t.ir:1:8: undefined value zz\nt.ir:3:5: unknown op nope"},
		{"no cascade", "param w: f33[2]\nr = relu w\ns = relu r\noutput s\nupdate w <- s\n",
			"t.ir:1:10: unknown dtype f33, did you mean f32?"},
		{"bad byte", "param w: f32[2]\x01\n", "t.ir:1:16: unexpected byte 0x01, want an attribute name=value or end of line"},
		{"invalid utf-8", "param w: f32[2]\xff\n", "t.ir:1:16: invalid UTF-8 (byte 0xff): expected .ir text in UTF-8"},
		{"invalid utf-8 in a comment", "param w: f32[2]\n# caf\xe9\n", "t.ir:2:6: invalid UTF-8 (byte 0xe9): expected .ir text in UTF-8"},
		{"nul byte", "param w: f32[2]\n\x00\x00\n", "t.ir:2:1: NUL byte (0x00): the file looks binary, expected .ir text"},
		{"non-ascii character", "param w: f32[2]\nx = relu w\u2032\n", "t.ir:2:11: unexpected character '′' (U+2032), want an attribute name=value or end of line"},
		{"long token clipped", "x = " + strings.Repeat("a", 100) + "\n",
			"t.ir:1:5: unknown op " + strings.Repeat("a", 40) + "..."},
		{"no quadratic suggestion for long names", // 10^10 steps of edit distance without the guard
			"param " + strings.Repeat("n", 100000) + ": f32[1]\nx = relu " + strings.Repeat("n", 99999) + "m\n",
			"t.ir:2:10: undefined value " + strings.Repeat("n", 40) + "..."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Parse("t.ir", []byte(c.src))
			require.Error(t, err)
			assert.Nil(t, g)
			assert.Equal(t, c.want, err.Error())
		})
	}
}

func TestParseFile(t *testing.T) {
	g, err := ParseFile("testdata/roundtrip/embedding.ir")
	require.NoError(t, err)
	assert.Equal(t, "embedding", g.Name)
	id, ok := g.Lookup("logits")
	require.True(t, ok)
	assert.Equal(t, ir.Pos{File: "testdata/roundtrip/embedding.ir", Line: 7, Col: 10}, g.Values[id].Pos, "an op's position is its op name")
	assert.Equal(t, ir.Pos{File: "testdata/roundtrip/embedding.ir", Line: 2, Col: 7}, g.Values[0].Pos, "a leaf's position is its name")

	_, err = ParseFile("testdata/no-such-file.ir")
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = ParseFile("testdata/errors/arity.ir")
	require.ErrorContains(t, err, "testdata/errors/arity.ir:3:5: matmul: wants 2 operands, got 3")
}

func TestParseInt(t *testing.T) {
	cases := []struct {
		in          string
		n           int
		isInt, fits bool
	}{
		{"0", 0, true, true},
		{"-17", -17, true, true},
		{"+5", 5, true, true},
		{"9223372036854775807", 9223372036854775807, true, true},
		{"-9223372036854775808", -9223372036854775808, true, true},
		{"9223372036854775808", 0, true, false},
		{"-9223372036854775809", 0, true, false},
		{"184467440737095516160", 0, true, false},
		{"1.5", 0, false, false},
		{"-", 0, false, false},
		{"", 0, false, false},
		{"1e3", 0, false, false},
	}
	for _, c := range cases {
		n, isInt, fits := parseInt([]byte(c.in))
		assert.Equal(t, c.n, n, c.in)
		assert.Equal(t, c.isInt, isInt, c.in)
		assert.Equal(t, c.fits, fits, c.in)
	}
}

func TestLexLine(t *testing.T) {
	cases := []struct {
		line string
		want []string // kind:text
	}{
		{"h = matmul x, w1 # c", []string{"name:h", "'=':=", "name:matmul", "name:x", "',':,", "name:w1", "end of line:"}},
		{"update w <- w.next", []string{"name:update", "name:w", "'<-':<-", "name:w.next", "end of line:"}},
		{`a=-1e-05 b="x\"#y" c=[1,-2] d=-inf`, []string{"name:a", "'=':=", "number:-1e-05", "name:b", "'=':=", `string:"x\"#y"`,
			"name:c", "'=':=", "'[':[", "number:1", "',':,", "number:-2", "']':]", "name:d", "'=':=", "number:-inf", "end of line:"}},
		{"x $ y", []string{"name:x", "bad character:$", "end of line:"}},
		{`s="open`, []string{"name:s", "'=':=", `bad character:"open`, "end of line:"}},
	}
	for _, c := range cases {
		var got []string
		for _, tok := range lexLine([]byte(c.line), nil) {
			got = append(got, tok.kind.String()+":"+string(tok.text))
		}
		assert.Equal(t, c.want, got, c.line)
	}
}

// TestRoundTripSynthetic round-trips a graph built through the ir API rather than written
// by hand, the benchmark's generator included.
func TestRoundTripSynthetic(t *testing.T) {
	g := syntheticGPT(t, 2)
	text := checkRoundTrip(t, "synthetic", []byte(g.String()))
	assert.Equal(t, g.String(), text)
}

// BenchmarkParseGPT39B parses and verifies the zoo's GPT-39B forward graph (Alpa's largest
// GPT: 48 layers, hidden 8192, 64 heads).
func BenchmarkParseGPT39B(b *testing.B) {
	src, err := os.ReadFile("../testdata/models/gpt-39b.ir")
	if errors.Is(err, os.ErrNotExist) {
		b.Skip("../testdata/models/gpt-39b.ir is not generated yet")
	}
	require.NoError(b, err)
	benchParse(b, src)
}

// BenchmarkParseSynthetic parses GPT-like graphs of growing depth, printed from graphs built
// in the setup, to show that parsing stays linear well past the size of a GPT-39B training
// step (about 10k values).
func BenchmarkParseSynthetic(b *testing.B) {
	for _, layers := range []int{48, 480, 4800} {
		src := []byte(syntheticGPT(b, layers).String())
		b.Run(fmt.Sprintf("layers=%d", layers), func(b *testing.B) { benchParse(b, src) })
	}
}

func benchParse(b *testing.B, src []byte) {
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	values := 0
	for b.Loop() {
		g, err := Parse("bench.ir", src)
		if err != nil {
			b.Fatal(err)
		}
		values = len(g.Values)
	}
	b.ReportMetric(float64(values), "values")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(values), "ns/value")
}

// syntheticGPT builds a pre-LN transformer of the given depth through ir.Graph.Append, the
// same op mix as the zoo's GPT at a small width (parse cost does not depend on dim sizes).
func syntheticGPT(tb testing.TB, layers int) *ir.Graph {
	const batch, seq, hidden, heads = 2, 16, 64, 4
	g := ir.NewGraph("synthetic")
	n := 0
	add := func(op ir.Op, name string, at ir.Attrs, args ...ir.ValueID) ir.ValueID {
		n++
		id, err := g.Append(op, name, args, at, ir.Pos{Line: n, Col: 1})
		require.NoError(tb, err)
		return id
	}
	param := func(name string, shape ...int) ir.ValueID {
		return add(ir.OpParam, name, ir.Attrs{}.With("type", ir.Type{DType: ir.F32, Shape: shape}))
	}
	spec := func(s string) ir.Attrs { return ir.Attrs{}.With("spec", s) }
	shape := func(s ...int) ir.Attrs { return ir.Attrs{}.With("shape", s) }
	x := add(ir.OpInput, "x", ir.Attrs{}.With("type", ir.Type{DType: ir.F32, Shape: ir.Shape{batch, seq, hidden}}).With("batch", 0))
	for l := range layers {
		p := fmt.Sprintf("l%d.", l)
		ln := add(ir.OpLayerNorm, p+"ln", nil, x, param(p+"ln.g", hidden), param(p+"ln.b", hidden))
		var qkv [3]ir.ValueID
		for i, w := range []string{"q", "k", "v"} {
			e := add(ir.OpEinsum, p+w+".e", spec("bsi,io->bso"), ln, param(p+w+".w", hidden, hidden))
			a := add(ir.OpAdd, p+w, nil, e, param(p+w+".b", hidden))
			qkv[i] = add(ir.OpReshape, p+w+".heads", shape(batch, seq, heads, hidden/heads), a)
		}
		s := add(ir.OpEinsum, p+"scores", spec("bqnd,bknd->bnqk"), qkv[0], qkv[1])
		sm := add(ir.OpSoftmax, p+"probs", ir.Attrs{}.With("axis", 3), s)
		c := add(ir.OpEinsum, p+"ctx", spec("bnqk,bknd->bqnd"), sm, qkv[2])
		c = add(ir.OpReshape, p+"ctx.flat", shape(batch, seq, hidden), c)
		o := add(ir.OpEinsum, p+"proj", spec("bsi,io->bso"), c, param(p+"proj.w", hidden, hidden))
		x = add(ir.OpAdd, p+"res1", nil, x, o)
		ln2 := add(ir.OpLayerNorm, p+"ln2", nil, x, param(p+"ln2.g", hidden), param(p+"ln2.b", hidden))
		up := add(ir.OpEinsum, p+"up", spec("bsi,io->bso"), ln2, param(p+"up.w", hidden, 4*hidden))
		act := add(ir.OpGelu, p+"gelu", nil, up)
		down := add(ir.OpEinsum, p+"down", spec("bsi,io->bso"), act, param(p+"down.w", 4*hidden, hidden))
		x = add(ir.OpDropout, p+"drop", ir.Attrs{}.With("rate", 0.1).With("seed", l), down)
	}
	g.AddOutput(add(ir.OpReduceMean, "loss", ir.Attrs{}.With("axes", []int{0, 1, 2}), x), ir.Pos{})
	require.NoError(tb, ir.Verify(g))
	return g
}

// ParseFile names an empty model file, or one of only comments, as such rather than
// returning the empty graph that a later pass would reject with a puzzling message.
func TestParseFileEmpty(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{"empty.ir": "", "blank.ir": "\n  \n", "comments.ir": "# nothing\n"} {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
		_, err := ParseFile(path)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), path+":1:1: the file")
	}
}

func TestReadFileLimit(t *testing.T) {
	_, err := ReadFile("/dev/zero", 1<<10)
	var se *SizeError
	require.ErrorAs(t, err, &se)
	assert.EqualError(t, err, "/dev/zero: larger than the limit of 1 KiB on input files")
	path := filepath.Join(t.TempDir(), "m.ir")
	require.NoError(t, os.WriteFile(path, []byte("param w: f32[2]\n"), 0o644))
	src, err := ReadFile(path, 16)
	require.NoError(t, err)
	assert.Len(t, src, 16)
	_, err = ReadFile(path, 15)
	assert.EqualError(t, err, path+": larger than the limit of 15 bytes on input files")
	_, err = ReadFile(filepath.Join(t.TempDir(), "none.ir"), 16)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestParseLimitedStopsAtTheLimit(t *testing.T) {
	src := []byte("param w: f32[2]\na = neg w\nb = neg a\nc = neg b\noutput c\n")
	g, err := ParseLimited("m.ir", src, 4)
	require.NoError(t, err)
	assert.Len(t, g.Values, 4)
	_, err = ParseLimited("m.ir", src, 2)
	var ve *ValuesError
	require.ErrorAs(t, err, &ve)
	assert.EqualError(t, err, "m.ir:3:1: the model has more than 2 values, the limit")
}
