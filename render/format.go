package render

import (
	"strconv"
	"strings"

	"github.com/autopar/autopar/mesh"
)

// stagePalette colours stages: ColorBrewer's Set3, light enough for black text, fixed so
// that the same stage has the same colour in every picture.
var stagePalette = [...]string{
	"#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
	"#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
}

// StageColor is the fill colour of stage s in the graph views.
func StageColor(s int) string { return stagePalette[s%len(stagePalette)] }

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

// SpecKey is a one-line key to the spec notation nt, printed under every table and
// picture that shows specs.
func SpecKey(nt mesh.Notation) string {
	switch nt {
	case mesh.JAX:
		return "specs: P(...) names, per tensor dim, the mesh axes splitting it ('x' axis 0, 'y' axis 1, None not split); unreduced={...}: partial sums over those axes"
	case mesh.DTensor:
		return "specs: one placement per mesh axis: Shard(d) splits tensor dim d, Replicate() copies, Partial() holds partial sums"
	}
	return "specs: one letter group per tensor dim: R replicated, S0/S1 split on mesh axis 0/1, S01 on both; +P0/+P1/+P01 partial sums over those axes; - (or scalar): a 0-d value"
}
