package ir

// FLOP counts the op table points at. They feed the compute-cost model and layer clustering,
// so they need to be right in proportion rather than to the last instruction.

func noFLOPs([]Type, Attrs, Type) float64 { return 0 }

// perResult counts k FLOPs per result element.
func perResult(k float64) func([]Type, Attrs, Type) float64 {
	return func(_ []Type, _ Attrs, res Type) float64 { return k * float64(res.Shape.NumElements()) }
}

// perOperand counts k FLOPs per element of the first operand.
func perOperand(k float64) func([]Type, Attrs, Type) float64 { return perOperandN(0, k) }

func perOperandN(i int, k float64) func([]Type, Attrs, Type) float64 {
	return func(args []Type, _ Attrs, _ Type) float64 { return k * float64(args[i].Shape.NumElements()) }
}

// contractionFLOPs is 2 (multiply and add) per point of the iteration space: the product of
// every label's size.
func contractionFLOPs(dims func([]Type, Attrs, Type) Dims) func([]Type, Attrs, Type) float64 {
	return func(args []Type, at Attrs, res Type) float64 { return iterationFLOPs(dims(args, at, res)) }
}

func iterationFLOPs(d Dims) float64 {
	f := 2.0
	for _, n := range d.Sizes {
		f *= float64(n)
	}
	return f
}

// convFLOPs is 2·N·O·Ho·Wo·C·KH·KW.
func convFLOPs(args []Type, _ Attrs, res Type) float64 {
	f := args[1].Shape
	return 2 * float64(res.Shape.NumElements()) * float64(f[1]*f[2]*f[3])
}

// convInputGradFLOPs equals the forward conv's count, with dy [N,O,Ho,Wo] as the output.
func convInputGradFLOPs(args []Type, _ Attrs, _ Type) float64 {
	f := args[1].Shape
	return 2 * float64(args[0].Shape.NumElements()) * float64(f[1]*f[2]*f[3])
}

func convFilterGradFLOPs(args []Type, _ Attrs, res Type) float64 {
	return 2 * float64(args[1].Shape.NumElements()) * float64(res.Shape[1]*res.Shape[2]*res.Shape[3])
}

// poolFLOPs counts one FLOP per window element per output element.
func poolFLOPs(_ []Type, at Attrs, res Type) float64 {
	w := at.Ints("window")
	return float64(res.Shape.NumElements()) * float64(w[0]*w[1])
}
