package ir

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a source position: a file, a 1-based line and a 1-based column. The zero Pos means
// "no position" (a value made by a pass rather than written by the user).
type Pos struct {
	File      string
	Line, Col int
}

// IsValid reports whether p points somewhere.
func (p Pos) IsValid() bool { return p.Line > 0 }

func (p Pos) String() string {
	if !p.IsValid() {
		if p.File != "" {
			return p.File
		}
		return "-"
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Note points at a place related to an error ("first defined here").
type Note struct {
	Pos Pos
	Msg string
}

// Error is a diagnostic a user can act on: where, what is wrong and what was expected.
type Error struct {
	Pos   Pos
	Msg   string
	Notes []Note
}

// Errorf makes an *Error at pos.
func Errorf(pos Pos, format string, args ...any) *Error {
	return &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

// WithNote adds a note and returns e, for chaining.
func (e *Error) WithNote(pos Pos, format string, args ...any) *Error {
	e.Notes = append(e.Notes, Note{Pos: pos, Msg: fmt.Sprintf(format, args...)})
	return e
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Pos.IsValid() || e.Pos.File != "" {
		b.WriteString(e.Pos.String())
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	for _, n := range e.Notes {
		fmt.Fprintf(&b, "\n\t%s: note: %s", n.Pos, n.Msg)
	}
	return b.String()
}

// ErrorList is several diagnostics, sorted by position.
type ErrorList []*Error

func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Err returns nil for an empty list, the list sorted by position otherwise.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i].Pos, l[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return l
}
