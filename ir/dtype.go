package ir

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// The element types. Invalid is the zero value, so a forgotten dtype is caught by Verify.
const (
	Invalid DType = iota
	F32
	F16
	BF16
	F64
	I32
	I64
	Bool
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "f32", F16: "f16", BF16: "bf16", F64: "f64", I32: "i32", I64: "i64", Bool: "bool"}
var dtypeSizes = [...]int{Invalid: 0, F32: 4, F16: 2, BF16: 2, F64: 8, I32: 4, I64: 8, Bool: 1}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the number of bytes of one element.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// IsFloat reports whether d is a floating-point type, the only kind autodiff differentiates.
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// IsInt reports whether d is an integer type.
func (d DType) IsInt() bool { return d == I32 || d == I64 }

// ParseDType returns the dtype named s ("f32", "i64", ...).
func ParseDType(s string) (DType, bool) {
	for i, n := range dtypeNames {
		if n == s && DType(i) != Invalid {
			return DType(i), true
		}
	}
	return Invalid, false
}
