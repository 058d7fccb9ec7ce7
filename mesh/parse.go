package mesh

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// The small parsers of command-line values: byte sizes (--memory 16GiB) and logical mesh
// shapes (--mesh 2x4). They are strict: anything but the documented form is an error that
// quotes the value, never a prefix read and the rest ignored.

// MaxBytes is the largest byte size ParseBytes accepts, 4 EiB: far past any device, and
// small enough that sums of a few sizes do not wrap an int64.
const MaxBytes = 1 << 62

// byteUnits are the unit suffixes ParseBytes knows: SI powers of 1000 (K, M, G, T, P) and
// binary powers of 1024 (Ki, Mi, Gi, Ti, Pi), each with or without a trailing B.
var byteUnits = map[string]int64{"": 1, "B": 1,
	"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "k": 1e3,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50,
}

var bytesRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?) ?([A-Za-z]*)$`)

// ParseBytes reads a positive byte size: a decimal number (16, 1.5, 2e9) with an optional
// unit K, M, G, T, P (powers of 1000) or Ki, Mi, Gi, Ti, Pi (powers of 1024), each with an
// optional B: "16GiB", "16Gi", "1.5G", "2e9", "512B". A fraction of a byte is rounded to the
// nearest byte. Zero, negative numbers, NaN, hexadecimal, unknown units, trailing text and
// sizes over MaxBytes are errors that quote s.
func ParseBytes(s string) (int64, error) {
	m := bytesRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("size %q: expected a positive number of bytes with an optional unit, e.g. 16GiB, 1.5G or 2e9", s)
	}
	unit := strings.TrimSuffix(m[2], "B")
	if m[2] == "B" {
		unit = ""
	}
	mult, ok := byteUnits[unit]
	if !ok || strings.HasSuffix(unit, "B") {
		return 0, fmt.Errorf("size %q: unknown unit %q, expected B, K, M, G, T, P (powers of 1000) or Ki, Mi, Gi, Ti, Pi (powers of 1024)", s, m[2])
	}
	var n int64
	if i, err := strconv.ParseInt(m[1], 10, 64); err == nil {
		if i > MaxBytes/mult {
			return 0, tooManyBytes(s)
		}
		n = i * mult
	} else {
		f, err := strconv.ParseFloat(m[1], 64)
		if err != nil && !isRange(err) {
			return 0, fmt.Errorf("size %q: %v", s, err)
		}
		v := math.Round(f * float64(mult))
		if isRange(err) && f != 0 || v > MaxBytes {
			return 0, tooManyBytes(s)
		}
		n = int64(v)
	}
	if n <= 0 {
		return 0, fmt.Errorf("size %q: expected at least one byte", s)
	}
	return n, nil
}

func isRange(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func tooManyBytes(s string) error {
	return fmt.Errorf("size %q: over the limit of %d bytes (4 EiB)", s, int64(MaxBytes))
}

// MaxMeshDevices bounds the device count of a mesh shape: a DeviceID is an int32.
const MaxMeshDevices = math.MaxInt32

var shapeRE = regexp.MustCompile(`^([0-9]+)[xX]([0-9]+)$`)

// ParseShape reads a logical mesh shape N0xN1 ("2x4", "1X8"): two positive decimal
// integers, without signs or spaces, whose product is at most MaxMeshDevices.
func ParseShape(s string) (n0, n1 int, err error) {
	m := shapeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, fmt.Errorf("mesh shape %q: expected N0xN1 with positive integers N0 and N1, e.g. 2x4", s)
	}
	a, errA := strconv.ParseInt(m[1], 10, 64)
	b, errB := strconv.ParseInt(m[2], 10, 64)
	if errA != nil || errB != nil || a > MaxMeshDevices || b > MaxMeshDevices || a*b > MaxMeshDevices {
		return 0, 0, fmt.Errorf("mesh shape %q: more than %d devices", s, MaxMeshDevices)
	}
	if a < 1 || b < 1 {
		return 0, 0, fmt.Errorf("mesh shape %q: expected positive N0 and N1, e.g. 2x4", s)
	}
	return int(a), int(b), nil
}
