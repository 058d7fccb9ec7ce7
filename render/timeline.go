package render

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/autopar/autopar/units"
)

// Layout of the timeline, in SVG user units (pixels).
const (
	tlLeft     = 150.0 // room for the row labels
	tlRight    = 30.0
	tlChart    = 1000.0 // width of the time axis
	tlTop      = 50.0
	tlRowH     = 28.0
	tlBarH     = 22.0
	tlCommH    = 8.0 // communication strip at the bottom of a bar
	tlMinLabel = 22.0
)

// Timeline writes s as an SVG Gantt chart: one row per device against time, a bar per
// task (forward in blues, backward in oranges, lighter for later micro-batches, the update
// in purple), a red strip at the foot of a bar for its communication, and a time axis.
// White space between bars is idle time: the pipeline bubbles. Each bar carries a tooltip.
// The same schedule gives byte-identical SVG.
func Timeline(w io.Writer, s *Schedule) error {
	if s == nil || len(s.Rows) == 0 {
		return fmt.Errorf("render: timeline: the schedule has no devices")
	}
	end := s.End()
	if end <= 0 {
		end = 1e-9
	}
	bw := bufio.NewWriter(w)
	height := tlTop + float64(len(s.Rows))*tlRowH + 90
	width := tlLeft + tlChart + tlRight
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		num(width), num(height), num(width), num(height))
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%s" y="24" font-size="14">%s</text>`+"\n", num(tlLeft), esc(s.Title))
	x := func(t float64) float64 { return tlLeft + t/end*tlChart }
	for r, row := range s.Rows {
		y := tlTop + float64(r)*tlRowH
		label := fmt.Sprintf("device %d", row.Device)
		if row.Stage >= 0 {
			label += fmt.Sprintf(" · stage %d", row.Stage)
		} else {
			label += " · unused"
		}
		fmt.Fprintf(bw, `<text x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(tlLeft-8), num(y+tlBarH/2+4), esc(label))
		fmt.Fprintf(bw, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#eeeeee"/>`+"\n",
			num(tlLeft), num(y+tlBarH+3), num(tlLeft+tlChart), num(y+tlBarH+3))
	}
	for _, b := range s.Blocks {
		writeBlock(bw, b, x, s.Microbatches)
	}
	axisY := tlTop + float64(len(s.Rows))*tlRowH + 4
	writeAxis(bw, axisY, end, x)
	writeLegend(bw, axisY+45, s.Microbatches)
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

// writeBlock draws one bar with its tooltip, and its name when it fits.
func writeBlock(w io.Writer, b Block, x func(float64) float64, mbs int) {
	x0, x1 := x(b.Start), x(b.End)
	if x1-x0 <= 0 {
		return
	}
	y, h := tlTop+float64(b.Row)*tlRowH, tlBarH
	fill, stroke := blockColor(b.Kind, b.Microbatch, mbs), "#333333"
	if b.Kind == Comm {
		y, h, stroke = y+tlBarH-tlCommH, tlCommH, "none"
	}
	fmt.Fprintf(w, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s" stroke="%s" stroke-width="0.5"><title>%s</title></rect>`+"\n",
		num(x0), num(y), num(x1-x0), num(h), fill, stroke, esc(b.Note))
	if b.Kind == Comm || x1-x0 < tlMinLabel {
		return
	}
	name := "U"
	if b.Kind != Update {
		name = fmt.Sprintf("%c%d", strings.ToUpper(b.Kind.String())[0], b.Microbatch)
	}
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle" font-size="10">%s</text>`+"\n",
		num((x0+x1)/2), num(y+tlBarH/2+1), name)
}

// blockColor shades forward blocks blue and backward blocks orange, from dark for the
// first micro-batch to light for the last, so one micro-batch can be followed down the
// pipeline.
func blockColor(k BlockKind, mb, mbs int) string {
	frac := 0.0
	if mbs > 1 && mb >= 0 {
		frac = float64(mb) / float64(mbs-1)
	}
	switch k {
	case Forward:
		return hsl(210, 0.65, 0.40+0.35*frac)
	case Backward:
		return hsl(28, 0.85, 0.45+0.30*frac)
	case Update:
		return "#9467bd"
	}
	return "#d62728"
}

// writeAxis draws the time axis with ticks at a round step.
func writeAxis(w io.Writer, y, end float64, x func(float64) float64) {
	fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="black"/>`+"\n", num(tlLeft), num(y), num(tlLeft+tlChart), num(y))
	step := niceStep(end / 8)
	for i := 0; float64(i)*step <= end*(1+1e-9); i++ {
		t := float64(i) * step
		fmt.Fprintf(w, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="black"/>`+"\n", num(x(t)), num(y), num(x(t)), num(y+5))
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="middle">%s</text>`+"\n", num(x(t)), num(y+18), esc(units.Seconds(t)))
	}
	fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="end" fill="#555555">time →</text>`+"\n", num(tlLeft+tlChart), num(y+32))
}

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// writeLegend explains the colours.
func writeLegend(w io.Writer, y float64, mbs int) {
	items := []struct {
		name string
		fill string
	}{
		{"forward (micro-batch 0 … last, dark to light)", blockColor(Forward, 0, mbs)},
		{"backward", blockColor(Backward, 0, mbs)},
		{"communication", blockColor(Comm, 0, mbs)},
		{"update", blockColor(Update, -1, mbs)},
	}
	xpos := tlLeft
	for _, it := range items {
		fmt.Fprintf(w, `<rect x="%s" y="%s" width="14" height="12" fill="%s" stroke="#333333" stroke-width="0.5"/>`+"\n", num(xpos), num(y-10), it.fill)
		fmt.Fprintf(w, `<text x="%s" y="%s">%s</text>`+"\n", num(xpos+18), num(y), esc(it.name))
		xpos += 40 + 6.5*float64(len(it.name))
	}
	fmt.Fprintf(w, `<text x="%s" y="%s" fill="#555555">white gaps are idle time: the pipeline bubbles</text>`+"\n", num(tlLeft), num(y+20))
}

// hsl converts a colour to #rrggbb (h in degrees, s and l in [0, 1]).
func hsl(h, s, l float64) string {
	c := (1 - math.Abs(2*l-1)) * s
	hp := h / 60
	xx := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r, g, b float64
	switch {
	case hp < 1:
		r, g = c, xx
	case hp < 2:
		r, g = xx, c
	case hp < 3:
		g, b = c, xx
	case hp < 4:
		g, b = xx, c
	case hp < 5:
		r, b = xx, c
	default:
		r, b = c, xx
	}
	m := l - c/2
	to := func(v float64) int { return int(math.Round((v + m) * 255)) }
	return fmt.Sprintf("#%02x%02x%02x", to(r), to(g), to(b))
}

// num prints a coordinate with at most two decimals and no trailing zeros.
func num(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
