package mpi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime/kernels"
)

// A message is one tensor, self-describing so that a receiver needs no size in advance
// (it probes and receives what came), little-endian throughout:
//
//	0   "APT1"
//	4   dtype (u8), rank (u8), 2 bytes zero
//	8   the p2p tag's micro-batch (i64; 0 in collectives)
//	16  the p2p tag's value length L (u32), 4 bytes zero
//	24  the dims (i64 each)
//	    the tag's value (L bytes), zeros to a multiple of 8
//	    the elements as the kernels store them: f32 for f32, f16 and bf16 (bit-exact),
//	    f64 for f64, i64 for the integer and bool dtypes
//
// The bytes a transfer counts (runtime.Traffic) are those of the dtype (Type.Bytes), as
// in-process, not of this encoding.
const magic = "APT1"

func headerSize(rank, tagLen int) int { return 24 + 8*rank + (tagLen+7)/8*8 }

func elemSize(x *kernels.Tensor) int {
	if x.F32 != nil {
		return 4
	}
	return 8
}

func encodedSize(x *kernels.Tensor, tag program.Tag) int {
	return headerSize(x.Type.Shape.Rank(), len(tag.Value)) + elemSize(x)*x.Len()
}

// encode writes x and tag into b, which has encodedSize bytes.
func encode(b []byte, x *kernels.Tensor, tag program.Tag) {
	le := binary.LittleEndian
	copy(b, magic)
	b[4], b[5], b[6], b[7] = byte(x.Type.DType), byte(x.Type.Shape.Rank()), 0, 0
	le.PutUint64(b[8:], uint64(int64(tag.MicroBatch)))
	le.PutUint64(b[16:], uint64(len(tag.Value)))
	p := 24
	for _, d := range x.Type.Shape {
		le.PutUint64(b[p:], uint64(int64(d)))
		p += 8
	}
	n := copy(b[p:], tag.Value)
	clear(b[p+n : headerSize(x.Type.Shape.Rank(), n)])
	p = headerSize(x.Type.Shape.Rank(), n)
	if littleEndian {
		copy(b[p:], storageBytes(x))
		return
	}
	switch {
	case x.F32 != nil:
		for _, v := range x.F32 {
			le.PutUint32(b[p:], math.Float32bits(v))
			p += 4
		}
	case x.F64 != nil:
		for _, v := range x.F64 {
			le.PutUint64(b[p:], math.Float64bits(v))
			p += 8
		}
	default:
		for _, v := range x.Int {
			le.PutUint64(b[p:], uint64(v))
			p += 8
		}
	}
}

// littleEndian says whether this machine stores numbers as the wire does, so that elements
// move with one copy of their storage's bytes instead of one conversion each.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// storageBytes is x's storage slice seen as bytes (shared, not copied).
func storageBytes(x *kernels.Tensor) []byte {
	switch {
	case len(x.F32) > 0:
		return unsafe.Slice((*byte)(unsafe.Pointer(&x.F32[0])), 4*len(x.F32))
	case len(x.F64) > 0:
		return unsafe.Slice((*byte)(unsafe.Pointer(&x.F64[0])), 8*len(x.F64))
	case len(x.Int) > 0:
		return unsafe.Slice((*byte)(unsafe.Pointer(&x.Int[0])), 8*len(x.Int))
	}
	return nil
}

var errCorrupt = errors.New("corrupt message")

// decode reads a message back; a message that is not one (another program's, a truncated
// one) is an error saying what is wrong.
func decode(b []byte) (*kernels.Tensor, program.Tag, error) {
	le := binary.LittleEndian
	var tag program.Tag
	if len(b) < 24 || string(b[:4]) != magic {
		return nil, tag, fmt.Errorf("%w: %d bytes without the %q header", errCorrupt, len(b), magic)
	}
	dt, rank := ir.DType(b[4]), int(b[5])
	tag.MicroBatch = int(int64(le.Uint64(b[8:])))
	tagLen := le.Uint64(b[16:])
	if tagLen > uint64(len(b)) || headerSize(rank, int(tagLen)) > len(b) || dt.Size() == 0 {
		return nil, tag, fmt.Errorf("%w: header of dtype %d, rank %d, tag of %d bytes in %d bytes", errCorrupt, b[4], rank, tagLen, len(b))
	}
	shape := make(ir.Shape, rank)
	p := 24
	elems := int64(1)
	for i := range shape {
		d := int64(le.Uint64(b[p:]))
		if d < 0 || d > int64(len(b)) || elems*d > int64(len(b)) {
			return nil, tag, fmt.Errorf("%w: dim %d of %d", errCorrupt, i, d)
		}
		shape[i], elems = int(d), elems*d
		p += 8
	}
	tag.Value = string(b[p : p+int(tagLen)])
	p = headerSize(rank, int(tagLen))
	x := &kernels.Tensor{Type: ir.Type{DType: dt, Shape: shape}}
	size := int64(8)
	if dt == ir.F32 || dt == ir.F16 || dt == ir.BF16 {
		size = 4
	}
	if int64(len(b)-p) != elems*size {
		return nil, tag, fmt.Errorf("%w: %s needs %d bytes of elements, the message has %d", errCorrupt, x.Type, elems*size, len(b)-p)
	}
	x = kernels.New(x.Type)
	if littleEndian {
		copy(storageBytes(x), b[p:])
		return x, tag, nil
	}
	switch {
	case x.F32 != nil:
		for i := range x.F32 {
			x.F32[i] = math.Float32frombits(le.Uint32(b[p:]))
			p += 4
		}
	case x.F64 != nil:
		for i := range x.F64 {
			x.F64[i] = math.Float64frombits(le.Uint64(b[p:]))
			p += 8
		}
	default:
		for i := range x.Int {
			x.Int[i] = int64(le.Uint64(b[p:]))
			p += 8
		}
	}
	return x, tag, nil
}
