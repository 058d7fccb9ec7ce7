// Package runtime executes per-device programs (program.Program): one goroutine per device,
// each running its program's blocks in the schedule's order (expanded lazily: a device holds
// the buffers of the step and one set per micro-batch in flight, never the unrolled step),
// with its own buffers, exchanging data only through a Transport, so that the
// in-process transport (InProc, the default) can be replaced by a multi-process one without
// changing programs or the executor.
//
// Compute instructions call the kernels of runtime/kernels, the same ones the serial
// interpreter (runtime/interp) runs: a plan's programs, run here, must give the serial
// results, which is how the compiler is proven right. Each device counts the peak bytes it
// holds and the bytes it sends and receives under the accounting the plan predicts (see
// DeviceStats), and the time per instruction kind.
//
// Failures never hang and never panic out of Run: a kernel error or panic, a wait past the
// timeout or a cancelled context stops every device, and the error names the device, the
// instruction and, for a wait, the peers. runtime makes no plan decisions.
package runtime
