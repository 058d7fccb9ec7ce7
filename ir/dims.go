package ir

import "strings"

// Dims is the einsum-style dims signature of one op instance, what lets one generic rule
// produce sharding strategies for every op: matmul is "m k, k n -> m n". Each distinct
// dimension of the computation is a label; each tensor dim of each operand and of the
// result names the label it runs over.
//
// Splitting a label that appears in the result splits the result; splitting a label that
// appears only in operands (a contracted label) leaves a partial result to be summed.
// A Fixed label must not be split (the "*" of "softmax: a b* -> a b*"): softmax needs its
// whole row, a convolution's spatial dims need halos.
type Dims struct {
	// Operands[i][d] is the label of operand i's dim d, or -1 when that dim takes no part in
	// the label structure (a broadcast dim of size 1, or a dim no rule describes).
	Operands [][]int
	// Result[d] is the label of the result's dim d, or -1.
	Result []int
	// Sizes[l] is the extent of label l.
	Sizes []int
	// Fixed[l] is true when label l must not be split.
	Fixed []bool
}

// NumLabels is the number of distinct labels.
func (d Dims) NumLabels() int { return len(d.Sizes) }

// Contracted lists the labels that appear in some operand but not in the result: splitting
// one leaves a partial-sum result.
func (d Dims) Contracted() []int {
	inResult := make([]bool, len(d.Sizes))
	for _, l := range d.Result {
		if l >= 0 {
			inResult[l] = true
		}
	}
	var out []int
	for l := range d.Sizes {
		if !inResult[l] && d.used(l) {
			out = append(out, l)
		}
	}
	return out
}

func (d Dims) used(l int) bool {
	for _, op := range d.Operands {
		for _, x := range op {
			if x == l {
				return true
			}
		}
	}
	return false
}

// String prints the signature with letters a, b, c, ... and "*" on fixed labels:
// "a b, b c -> a c".
func (d Dims) String() string {
	var b strings.Builder
	for i, op := range d.Operands {
		if i > 0 {
			b.WriteString(", ")
		}
		d.writeLabels(&b, op)
	}
	b.WriteString(" -> ")
	d.writeLabels(&b, d.Result)
	return b.String()
}

func (d Dims) writeLabels(b *strings.Builder, labels []int) {
	for i, l := range labels {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case l < 0:
			b.WriteByte('_')
		case l < 26:
			b.WriteByte(byte('a' + l))
		default:
			b.WriteString("l")
			b.WriteString(itoa(l))
		}
		if l >= 0 && d.Fixed[l] {
			b.WriteByte('*')
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for n > 0 {
		i--
		buf[i] = byte('0' + n%10)
		n /= 10
	}
	return string(buf[i:])
}

// dimsBuilder accumulates labels while a Dims function walks an instance.
type dimsBuilder struct{ d Dims }

func (b *dimsBuilder) label(size int, fixed bool) int {
	b.d.Sizes = append(b.d.Sizes, size)
	b.d.Fixed = append(b.d.Fixed, fixed)
	return len(b.d.Sizes) - 1
}

// labels makes one fresh label per dim of shape.
func (b *dimsBuilder) labels(shape Shape) []int {
	out := make([]int, len(shape))
	for i, n := range shape {
		out[i] = b.label(n, false)
	}
	return out
}
