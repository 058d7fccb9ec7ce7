// Package units prints the quantities autopar reports — times, bytes, FLOP counts and
// FLOP rates — one way everywhere: the CLI's tables, explain, and the pictures.
//
// Times and FLOPs take SI prefixes with three significant digits (602 µs, 2.51 ms,
// 29.4 GFLOP); bytes take binary prefixes with one decimal (238.0 KiB, 8.0 GiB); rates are
// in TFLOP/s, the unit accelerator datasheets use. A value that is not finite prints as Go
// prints it, with its unit, so that a NaN in a report is seen, not hidden.
//
// The package knows no autopar type and imports nothing of autopar's.
package units

import (
	"math"
	"strconv"
)

// Seconds prints a duration given in seconds: 0 s, 3.2 ns, 471 µs, 2.12 ms, 1.5 s, 5400 s.
// Below a nanosecond it stays in ns (0.002 ns), so that an absurdly small prediction reads
// as one rather than as an exponent.
func Seconds(s float64) string {
	if s == 0 || !finite(s) {
		return strconv.FormatFloat(s, 'g', -1, 64) + " s"
	}
	r := roundSig(s, 3) // 999.6 µs rounds to 1 ms: pick the unit after rounding
	for _, u := range [...]struct {
		scale float64
		name  string
	}{{1, "s"}, {1e-3, "ms"}, {1e-6, "µs"}, {1e-9, "ns"}} {
		if math.Abs(r) >= u.scale || u.name == "ns" {
			return sig3(s/u.scale) + " " + u.name
		}
	}
	panic("units: unreachable")
}

// Bytes prints a byte count with a binary prefix: 512 B, 238.0 KiB, 8.0 GiB, 1.5 PiB.
func Bytes(b int64) string { return BytesF(float64(b)) }

// BytesF is [Bytes] for a count held as a float (an average, a prediction).
func BytesF(b float64) string {
	if !finite(b) {
		return strconv.FormatFloat(b, 'g', -1, 64) + " B"
	}
	if math.Abs(b) < 1024 {
		return strconv.FormatFloat(math.Round(b), 'f', -1, 64) + " B"
	}
	const prefixes = "KMGTPE"
	i := -1
	for math.Abs(b) >= 1024 && i < len(prefixes)-1 {
		b /= 1024
		i++
	}
	return strconv.FormatFloat(b, 'f', 1, 64) + " " + prefixes[i:i+1] + "iB"
}

// FLOPs prints a FLOP count with an SI prefix: 512 FLOP, 29.4 kFLOP, 1.2 GFLOP.
func FLOPs(f float64) string { return si(f) + "FLOP" }

// FLOPRate prints a rate given in FLOP/s, in TFLOP/s with three significant digits:
// 125 TFLOP/s, 0.00287 TFLOP/s.
func FLOPRate(perSecond float64) string {
	if perSecond == 0 || !finite(perSecond) {
		return strconv.FormatFloat(perSecond/1e12, 'g', -1, 64) + " TFLOP/s"
	}
	return sig3(perSecond/1e12) + " TFLOP/s"
}

// si prints x with three significant digits and an SI prefix and a trailing space.
func si(x float64) string {
	if x == 0 || !finite(x) {
		return strconv.FormatFloat(x, 'g', -1, 64) + " "
	}
	const prefixes = "kMGTPE"
	i := -1
	for math.Abs(x) >= 1000 && i < len(prefixes)-1 {
		x /= 1000
		i++
	}
	if r := roundSig(x, 3); math.Abs(r) >= 1000 && i < len(prefixes)-1 {
		x, i = r/1000, i+1 // 999.7 k rounds to 1000 k: say 1 M
	}
	if i < 0 {
		return sig3(x) + " "
	}
	return sig3(x) + " " + prefixes[i:i+1]
}

// sig3 prints x rounded to three significant digits, without exponent or trailing zeros.
func sig3(x float64) string { return strconv.FormatFloat(roundSig(x, 3), 'f', -1, 64) }

// roundSig rounds x to n significant digits.
func roundSig(x float64, n int) float64 {
	if x == 0 {
		return 0
	}
	p := math.Pow(10, float64(n-1)-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
