package plan

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseManual holds ParseManual (--plan tp=N,pp=N,dp=N) to its contract on any string:
// an error quotes the value; a success has every degree ≥ 1, a device count that fits an
// int32, and prints (Manual.String) to a form that reads back equal. Run it with
//
//	go test ./plan -run '^$' -fuzz '^FuzzParseManual$' -fuzztime 10m
func FuzzParseManual(f *testing.F) {
	for _, s := range []string{"tp=2", "tp=8,pp=2,dp=32", "dp=4, tp=2", "tp=2xyz,pp=2junk", "tp=2.9", "tp=2,tp=4",
		"tp=0", "tp=-1", "tp=+2", "tp=", "=2", "tp", "", ",", "tp=2,", "xp=2", "tp=99999999999", "TP=2",
		"tp=65536,pp=65536", "tp=2147483647", "tp=0x10", "tp=1_0", " tp = 2 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseManual(s)
		if err != nil {
			require.Nil(t, m)
			require.Contains(t, err.Error(), fmt.Sprintf("%q", s))
			return
		}
		require.True(t, m.TP >= 1 && m.PP >= 1 && m.DP >= 1, "%q gave %v", s, m)
		require.LessOrEqual(t, int64(m.TP)*int64(m.PP)*int64(m.DP), int64(1<<31-1), "%q", s)
		back, err := ParseManual(m.String())
		require.NoError(t, err)
		require.Equal(t, m, back)
	})
}

func TestParseManualStrict(t *testing.T) {
	for s, want := range map[string]Manual{"tp=2": {2, 1, 1}, "tp=8,pp=2,dp=32": {8, 2, 32}, " dp=4 , tp=2": {2, 1, 4},
		"pp=3": {1, 3, 1}} {
		m, err := ParseManual(s)
		require.NoError(t, err, s)
		require.Equal(t, want, *m, s)
	}
	for s, msg := range map[string]string{
		"tp=2xyz,pp=2junk": `tp="2xyz": expected a positive integer`, "tp=2.9": `tp="2.9"`, "tp=2,tp=4": "tp is given twice",
		"tp=0": `tp="0"`, "tp=-1": `tp="-1"`, "tp=+2": `tp="+2"`, "tp=": `tp=""`, "tp": `tp="": expected a positive integer`,
		"": `"" is not tp=N`, "tp=2,": `"" is not tp=N`, "xp=2": `unknown degree "xp"`, "TP=2": `unknown degree "TP"`,
		"tp=0x10": `tp="0x10"`, "tp=1_0": `tp="1_0"`, "tp=99999999999": "tp=99999999999 is more than 2147483647 devices",
		"tp=65536,pp=65536": "tp×pp×dp is more than 2147483647 devices",
	} {
		_, err := ParseManual(s)
		require.Error(t, err, s)
		require.Contains(t, err.Error(), fmt.Sprintf("plan %q: ", s)+msg)
	}
}
