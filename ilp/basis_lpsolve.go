package ilp

// The cgo side of warm starts (basis.go): reading lp_solve's final basis and handing it
// a starting one. lp_solve numbers a basis's entries 1..rows for the rows' slacks and
// rows+1..rows+columns for the columns; get_basis and set_basis with nonbasic TRUE list
// the rows basic entries first, then the nonbasic ones, each negative when at its lower
// bound (https://lpsolve.sourceforge.net/5.5/get_basis.htm, set_basis.htm).

/*
#cgo CFLAGS: -I/usr/include/lpsolve
#include <lp_lib.h>
*/
import "C"

import "fmt"

// basis reads the basis lp_solve ended with; nil when it holds none (no solve yet).
func (m *lpModel) basis() *Basis {
	rows := int(C.get_Nrows(m.lp))
	buf := make([]C.int, 1+rows+m.ncols)
	if C.get_basis(m.lp, &buf[0], 1) == 0 {
		return nil
	}
	b := &Basis{Rows: make([]BasisStatus, rows), Vars: make([]BasisStatus, m.ncols)}
	set := func(k int, s BasisStatus) {
		if k <= rows {
			b.Rows[k-1] = s
		} else {
			b.Vars[k-rows-1] = s
		}
	}
	for i := 1; i <= rows; i++ {
		set(abs(int(buf[i])), Basic)
	}
	for i := rows + 1; i <= rows+m.ncols; i++ {
		if k := int(buf[i]); k < 0 {
			set(-k, AtLower)
		} else {
			set(k, AtUpper)
		}
	}
	return b
}

// setBasis makes b, complete for the model (extend's output), lp_solve's starting basis.
func (m *lpModel) setBasis(b *Basis) error {
	rows := len(b.Rows)
	buf := make([]C.int, 1, 1+rows+len(b.Vars))
	nonbasic := make([]C.int, 0, len(b.Vars))
	add := func(k int, s BasisStatus) {
		switch s {
		case Basic:
			buf = append(buf, C.int(-k))
		case AtLower:
			nonbasic = append(nonbasic, C.int(-k))
		default:
			nonbasic = append(nonbasic, C.int(k))
		}
	}
	for i, s := range b.Rows {
		add(i+1, s)
	}
	for j, s := range b.Vars {
		add(rows+j+1, s)
	}
	buf = append(buf, nonbasic...)
	if C.set_basis(m.lp, &buf[0], 1) == 0 {
		return fmt.Errorf("ilp: lp_solve set_basis refused a basis of %d rows and %d columns", rows, len(b.Vars))
	}
	return nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
