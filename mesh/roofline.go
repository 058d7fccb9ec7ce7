package mesh

import (
	"fmt"
	"math"
)

// The per-op roofline. One kernel of one op on one device takes
//
//	max(FLOPs / Rate(class, precision), bytes read and written / DeviceMemoryBandwidth)
//	  + KernelOverhead + ClassOverhead(class)
//
// where the rate depends on what the op computes (a contraction, a convolution, or
// elementwise/vector work) and the precision it computes in. Without FuseElementwise every
// op is its own kernel, as on the built-in runtime, which runs one kernel per compute
// instruction (docs/DECISIONS.md, "Roofline"); with it, an elementwise op fused into its
// reader's kernel is priced by FusedOpTime.

// OpClass says which FLOP rate of a device an op runs at.
type OpClass uint8

// The op classes.
const (
	// ClassMatmul: contractions (matmul, einsum), tensor cores on a GPU, BLAS on a CPU.
	ClassMatmul OpClass = iota
	// ClassConv: convolutions and their gradients (cuDNN's implicit GEMM).
	ClassConv
	// ClassVector: everything else (elementwise, softmax, layout, gathers), which runs
	// on the vector units and is usually bound by memory bandwidth.
	ClassVector
	// ClassBatchedMatmul: contractions with a batch label, one in every operand and the
	// result (attention's scores and context): one small GEMM per batch element, operands
	// permuted first. Without its own rates it runs at ClassMatmul's.
	ClassBatchedMatmul
	// ClassReduce: reductions and row normalizations (reduce_sum, reduce_mean, layer_norm,
	// batch_norm, cumsum), whose op-table FLOPs cost less than an elementwise op's on a
	// CPU. Without its own rates it runs at ClassVector's.
	ClassReduce
)

// OpClasses lists every class, in their order.
var OpClasses = []OpClass{ClassMatmul, ClassConv, ClassVector, ClassBatchedMatmul, ClassReduce}

var opClassNames = [...]string{"matmul", "conv", "vector", "batched_matmul", "reduce"}

// contraction reports whether class runs on the matrix units (tensor cores, BLAS): TF32
// and ContractionSpeedup apply to it.
func (c OpClass) contraction() bool {
	return c == ClassMatmul || c == ClassConv || c == ClassBatchedMatmul
}

func (c OpClass) String() string {
	if int(c) < len(opClassNames) {
		return opClassNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Precision is the arithmetic a kernel runs in.
type Precision uint8

// The precisions. F16 stands for bf16 as well: every device we price runs them at one
// rate. TF32 is what an f32 contraction runs in on tensor cores when Cluster.TF32 is set;
// callers pass F32 and the cluster decides.
const (
	F32 Precision = iota
	TF32
	F16
)

var precisionNames = [...]string{"f32", "tf32", "f16"}

func (p Precision) String() string {
	if int(p) < len(precisionNames) {
		return precisionNames[p]
	}
	return fmt.Sprintf("precision(%d)", uint8(p))
}

// Rates are a device's peak FLOP/s in each precision for one op class. A zero rate is
// not known and falls back (see Cluster.Rate): tf32 to f32, f16 to f32.
type Rates struct {
	F32  float64 `json:"f32,omitempty"`
	TF32 float64 `json:"tf32,omitempty"`
	F16  float64 `json:"f16,omitempty"` // f16 and bf16
}

// FLOPTable holds a device's rates per op class. A missing class falls back: reduce to
// vector, batched_matmul, conv and vector to matmul, matmul to DeviceFLOPS in every
// precision, which is how a cluster spec written before a class existed is priced.
type FLOPTable struct {
	Matmul        *Rates `json:"matmul,omitempty"`
	Conv          *Rates `json:"conv,omitempty"`
	Vector        *Rates `json:"vector,omitempty"`
	BatchedMatmul *Rates `json:"batched_matmul,omitempty"`
	Reduce        *Rates `json:"reduce,omitempty"`
}

// own is the class's own rates, nil when the table has none for it.
func (t *FLOPTable) own(c OpClass) *Rates {
	if t == nil {
		return nil
	}
	switch c {
	case ClassMatmul:
		return t.Matmul
	case ClassConv:
		return t.Conv
	case ClassVector:
		return t.Vector
	case ClassBatchedMatmul:
		return t.BatchedMatmul
	case ClassReduce:
		return t.Reduce
	}
	return nil
}

// fallback is the class whose rates a class without its own runs at.
func (c OpClass) fallback() OpClass {
	if c == ClassReduce {
		return ClassVector
	}
	return ClassMatmul
}

// priced is the class whose rates (and class overhead) c runs at in t: c, or the first
// of its fallbacks the table has.
func (t *FLOPTable) priced(c OpClass) OpClass {
	for c != ClassMatmul && t.own(c) == nil {
		c = c.fallback()
	}
	return c
}

func (t *FLOPTable) class(c OpClass) *Rates { return t.own(t.priced(c)) }

func (r *Rates) of(p Precision) float64 {
	if r == nil {
		return 0
	}
	switch p {
	case TF32:
		if r.TF32 > 0 {
			return r.TF32
		}
	case F16:
		if r.F16 > 0 {
			return r.F16
		}
	}
	return r.F32
}

// Rate is the FLOP/s a device sustains on ops of class c in precision p: the table's peak
// (after its fallbacks, see FLOPTable and Rates; DeviceFLOPS when the table has nothing)
// times Efficiency. An f32 contraction or convolution runs at the TF32 rate when TF32 is
// set.
func (c *Cluster) Rate(class OpClass, p Precision) float64 {
	if p == F32 && c.TF32 && class.contraction() {
		p = TF32
	}
	r := c.FLOPs.class(class).of(p)
	if r <= 0 {
		r = c.DeviceFLOPS
	}
	return r * c.Efficiency
}

// ClassOverheads are seconds per kernel of each class beyond Cluster.KernelOverhead. A
// batched_matmul or reduce kernel that the FLOP table prices at its fallback's rates (it
// has none of its own: a spec written before those classes) pays its fallback's overhead.
type ClassOverheads struct {
	Matmul        float64 `json:"matmul,omitempty"`
	Conv          float64 `json:"conv,omitempty"`
	Vector        float64 `json:"vector,omitempty"`
	BatchedMatmul float64 `json:"batched_matmul,omitempty"`
	Reduce        float64 `json:"reduce,omitempty"`
}

func (o *ClassOverheads) of(c OpClass) float64 {
	if o == nil {
		return 0
	}
	switch c {
	case ClassMatmul:
		return o.Matmul
	case ClassConv:
		return o.Conv
	case ClassBatchedMatmul:
		return o.BatchedMatmul
	case ClassReduce:
		return o.Reduce
	}
	return o.Vector
}

// classOverhead is what a kernel of class costs beyond KernelOverhead (ClassOverheads).
func (c *Cluster) classOverhead(class OpClass) float64 {
	if (class == ClassBatchedMatmul || class == ClassReduce) && c.FLOPs.own(class) == nil {
		class = class.fallback()
	}
	return c.ClassOverhead.of(class)
}

// OpTime is the roofline time of one kernel on one device: the slower of its arithmetic
// (flops at Rate(class, p)) and its memory traffic (bytes read and written at
// DeviceMemoryBandwidth), plus the per-kernel overhead and its class's (ClassOverhead).
// A kernel with neither flops nor bytes still pays the overheads.
func (c *Cluster) OpTime(class OpClass, p Precision, flops, bytes float64) float64 {
	return c.FusedOpTime(class, p, flops, bytes) + c.KernelOverhead + c.classOverhead(class)
}

// FusedOpTime is OpTime without the kernel overheads (neither KernelOverhead nor the
// class's): the time of an op that runs inside the kernel of the op reading its result
// (Cluster.FuseElementwise), bytes being only what it reads and writes outside that
// kernel.
func (c *Cluster) FusedOpTime(class OpClass, p Precision, flops, bytes float64) float64 {
	t := 0.0
	if flops > 0 {
		t = flops / c.Rate(class, p)
	}
	if bytes > 0 {
		t = math.Max(t, bytes/c.DeviceMemoryBandwidth)
	}
	return t
}

// validateRoofline checks the optional roofline fields: rates finite and not negative
// (zero: fall back), the overhead finite and not negative.
func (c *Cluster) validateRoofline() error {
	if err := c.checkNumber("kernel overhead", c.KernelOverhead, false); err != nil {
		return err
	}
	if o := c.ClassOverhead; o != nil {
		for _, cl := range OpClasses {
			if err := c.checkNumber("class_overhead."+cl.String(), o.of(cl), false); err != nil {
				return err
			}
		}
	}
	if c.FLOPs == nil {
		return nil
	}
	for _, cl := range OpClasses {
		r := c.FLOPs.own(cl)
		if r == nil {
			continue
		}
		for p, v := range []float64{r.F32, r.TF32, r.F16} {
			name := fmt.Sprintf("flops.%s.%s", cl, Precision(p))
			if err := c.checkNumber(name, v, false); err != nil {
				return err
			}
		}
	}
	return nil
}
