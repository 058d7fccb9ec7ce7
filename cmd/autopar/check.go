package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/autopar/autopar/ir"
	"github.com/autopar/autopar/runtime"
	"github.com/autopar/autopar/runtime/interp"
	"github.com/autopar/autopar/runtime/kernels"
)

// checkStep runs the full-batch step serially on the same feeds and prints the largest
// differences from the parallel run, by kind. It fails when a tensor is missing, not a
// number, or differs by more than tol relative to the largest magnitude of its kind.
func checkStep(ctx context.Context, w io.Writer, full *ir.Graph, feeds interp.Feeds, got *runtime.Result, tol float64) error {
	want, err := interp.RunKeep(ctx, full, feeds)
	if err != nil {
		return fmt.Errorf("--check: serial run: %w", err)
	}
	var loss, grads, params diff
	loss.add(full.Value(full.Outputs[0].Value).Name, got.Stores, want.Outputs[0])
	gradOf := full.ByRole(ir.RoleGrad)
	for _, p := range full.Leaves(ir.OpParam) {
		if id := gradOf[p]; id != ir.NoValue {
			grads.add(full.Value(id).Name, got.Stores, want.Values[id])
		}
	}
	names := make([]string, 0, len(want.Updates))
	for name := range want.Updates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		params.add(name, got.Stores, want.Updates[name])
	}
	fmt.Fprintf(w, "      check: loss %s; gradients %s; params %s\n", loss, grads, params)
	for _, k := range []struct {
		kind string
		d    diff
	}{{"loss", loss}, {"gradients", grads}, {"params", params}} {
		if err := k.d.check(tol); err != nil {
			return fmt.Errorf("--check: %s: %w", k.kind, err)
		}
	}
	return nil
}

// diff tracks, over the tensors of one kind, the largest absolute difference and the
// largest magnitude. The relative difference is the one over the other: element-wise or even
// per-tensor ratios would report rounding noise as error where values cancel (the gradient
// of attention's key bias is zero in exact arithmetic, so both runs hold noise there).
type diff struct {
	abs, scale float64
	worst      string
	missing    []string
	nan        string // the first tensor holding a NaN or an infinity, in either run
}

func (d *diff) add(name string, stores map[string]*kernels.Tensor, want *kernels.Tensor) {
	got, ok := stores[name]
	if !ok || want == nil || got.Len() != want.Len() {
		d.missing = append(d.missing, name)
		return
	}
	for i := range got.Len() {
		x, y := got.At(i), want.At(i)
		if !finite(x) || !finite(y) {
			if d.nan == "" {
				d.nan = fmt.Sprintf("%s[%d] is %v here and %v serially", name, i, x, y)
			}
			continue
		}
		if e := math.Abs(x - y); e > d.abs {
			d.abs, d.worst = e, name
		}
		d.scale = max(d.scale, math.Abs(x), math.Abs(y))
	}
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// rel is the largest absolute difference over the largest magnitude.
func (d diff) rel() float64 {
	if d.scale > 0 {
		return d.abs / d.scale
	}
	return 0
}

// check fails on a missing tensor, a NaN or infinity, or a relative difference over tol.
func (d diff) check(tol float64) error {
	switch {
	case len(d.missing) > 0:
		return fmt.Errorf("%d tensors missing from the parallel run: %v", len(d.missing), d.missing)
	case d.nan != "":
		return fmt.Errorf("not a number: %s", d.nan)
	case d.rel() > tol:
		return fmt.Errorf("relative difference %.3g from the serial run (%s) is over --tolerance %.3g", d.rel(), d.worst, tol)
	}
	return nil
}

func (d diff) String() string {
	s := fmt.Sprintf("max abs %.3g, rel %.3g", d.abs, d.rel())
	if d.nan != "" {
		s = "NaN: " + d.nan
	}
	if d.worst != "" && d.abs > 0 {
		s += " (" + d.worst + ")"
	}
	if len(d.missing) > 0 {
		s += fmt.Sprintf(", %d missing: %v", len(d.missing), d.missing)
	}
	return s
}
