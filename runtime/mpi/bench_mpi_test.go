//go:build mpi

package mpi_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/autopar/autopar/program"
	"github.com/autopar/autopar/runtime"
)

// BenchmarkAllReduceMPI is the MPI transport's all-reduce, one rank per device.
func BenchmarkAllReduceMPI(b *testing.B) {
	w := benchWorld(b)
	group := make([]runtime.DeviceID, w.Size())
	progs := make([]*program.Program, w.Size())
	for d := range group {
		group[d] = runtime.DeviceID(d)
	}
	for d := range progs {
		progs[d] = &program.Program{Device: group[d], Instrs: []program.Instr{{Kind: program.AllReduce, Group: group}}}
	}
	tr, err := w.NewTransport(progs)
	if err != nil {
		b.Fatal(err)
	}
	for _, elems := range benchSizes {
		b.Run(fmt.Sprintf("elems=%d", elems), func(b *testing.B) {
			x := benchTensor(elems, uint64(w.Rank()+1))
			if err := w.Barrier(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(x.Type.Bytes())
			b.ResetTimer()
			for range b.N {
				if _, _, err := tr.AllReduce(context.Background(), runtime.DeviceID(w.Rank()), group, x); err != nil {
					b.Fatal(err)
				}
			}
			if err := tr.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
