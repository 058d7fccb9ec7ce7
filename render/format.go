package render

import (
	"math"
	"strconv"
	"strings"

	"github.com/autopar/autopar/mesh"
	"github.com/autopar/autopar/passes/sharding"
)

// stagePalette colours stages: ColorBrewer's Set3, light enough for black text, fixed so
// that the same stage has the same colour in every picture.
var stagePalette = [...]string{
	"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
	"#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
}

// StageColor is the fill colour of stage s in the graph views.
func StageColor(s int) string { return stagePalette[s%len(stagePalette)] }

// formatSeconds prints a duration with three significant digits and an SI unit: 602 µs,
// 2.51 ms, 1.2 s. Zero prints as 0 s.
func formatSeconds(t float64) string {
	if t == 0 || math.IsNaN(t) || math.IsInf(t, 0) {
		return strconv.FormatFloat(t, 'g', -1, 64) + " s"
	}
	units := []struct {
		scale float64
		name  string
	}{{1, "s"}, {1e-3, "ms"}, {1e-6, "µs"}, {1e-9, "ns"}}
	for _, u := range units {
		if math.Abs(t) >= u.scale || u.name == "ns" {
			return strconv.FormatFloat(roundSig(t/u.scale, 3), 'f', -1, 64) + " " + u.name
		}
	}
	panic("render: unreachable")
}

// roundSig rounds x to n significant digits.
func roundSig(x float64, n int) float64 {
	if x == 0 {
		return 0
	}
	p := math.Pow(10, float64(n-1)-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

// formatFLOPs prints a FLOP count with an SI prefix: 29.4 kFLOP, 1.2 GFLOP.
func formatFLOPs(f float64) string {
	prefixes := []string{"", "k", "M", "G", "T", "P", "E"}
	i := 0
	for math.Abs(f) >= 1000 && i < len(prefixes)-1 {
		f /= 1000
		i++
	}
	return strconv.FormatFloat(roundSig(f, 3), 'f', -1, 64) + " " + prefixes[i] + "FLOP"
}

func formatBytes(b int64) string { return sharding.FormatBytes(b) }

// specText is a spec in notation nt (mesh.Notation.Format); in Alpa's, a scalar's empty
// spec reads "scalar" so that a label never ends in nothing.
func specText(s mesh.Spec, nt mesh.Notation) string {
	if nt != mesh.Alpa {
		return nt.Format(s)
	}
	if t := s.String(); t != "" {
		return t
	}
	if s.Partial != mesh.AxesNone {
		return "scalar+P" + s.Partial.Digits()
	}
	return "scalar"
}

// collectiveName spells a collective as people write it: all-gather, not all_gather.
func collectiveName(k mesh.Collective) string { return strings.ReplaceAll(k.String(), "_", "-") }

// deviceRange prints a sorted device list compactly: 0-3, or 0,2,5 when not contiguous.
func deviceRange(devs []int) string {
	if len(devs) == 0 {
		return "none"
	}
	contiguous := true
	for i := 1; i < len(devs); i++ {
		if devs[i] != devs[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous && len(devs) > 1 {
		return strconv.Itoa(devs[0]) + "-" + strconv.Itoa(devs[len(devs)-1])
	}
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = strconv.Itoa(d)
	}
	return strings.Join(parts, ",")
}
