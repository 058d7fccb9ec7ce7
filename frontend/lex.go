package frontend

// The .ir lexer. It works one line at a time, because the format is line-oriented and
// because recovering after a bad line is then just moving to the next one. Tokens are slices
// of the source, not strings, and the token buffer is reused from line to line, so lexing a
// large model allocates almost nothing; the parser converts to strings only what it keeps
// (value names).

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// tokKind is the kind of one token.
type tokKind uint8

const (
	tokEOL    tokKind = iota // end of the line (or the start of a # comment)
	tokIdent                 // a name, keyword, op name or dtype: [A-Za-z_][A-Za-z0-9_.]*
	tokNumber                // an int or float literal, classified when parsed
	tokString                // a double-quoted string, escapes as in Go
	tokEq                    // =
	tokComma                 // ,
	tokColon                 // :
	tokLBrack                // [
	tokRBrack                // ]
	tokArrow                 // <-
	tokBad                   // a character that starts no token, or an unterminated string
)

var tokNames = [...]string{tokEOL: "end of line", tokIdent: "name", tokNumber: "number",
	tokString: "string", tokEq: "'='", tokComma: "','", tokColon: "':'", tokLBrack: "'['",
	tokRBrack: "']'", tokArrow: "'<-'", tokBad: "bad character"}

func (k tokKind) String() string { return tokNames[k] }

// token is one lexeme of the current line. text aliases the source.
type token struct {
	kind tokKind
	col  int // 1-based byte column
	text []byte
}

// describe names the token for an "unexpected ..." message.
func (t token) describe() string {
	switch t.kind {
	case tokEOL, tokEq, tokComma, tokColon, tokLBrack, tokRBrack, tokArrow:
		return t.kind.String()
	case tokBad:
		if t.text[0] == '"' {
			return "unterminated string"
		}
		if r, n := utf8.DecodeRune(t.text); n > 1 {
			return fmt.Sprintf("character %q (U+%04X)", r, r)
		}
		return quoteByte(t.text[0])
	}
	return t.kind.String() + " " + clip(string(t.text))
}

// clip shortens s for a message, so a fuzzed megabyte token does not make a megabyte error.
func clip(s string) string {
	const maxLen = 40
	if len(s) > maxLen {
		return s[:maxLen] + "..."
	}
	return s
}

// badText finds the first byte of line that cannot be in .ir text: a NUL, or a byte that
// is not part of valid UTF-8. It returns its 1-based column and what is wrong, or 0.
func badText(line []byte) (int, string) {
	if utf8.Valid(line) && bytes.IndexByte(line, 0) < 0 {
		return 0, ""
	}
	for i := 0; i < len(line); {
		r, n := utf8.DecodeRune(line[i:])
		switch {
		case r == 0:
			return i + 1, "NUL byte (0x00): the file looks binary, expected .ir text"
		case r == utf8.RuneError && n == 1:
			return i + 1, "invalid UTF-8 (byte " + quoteByte(line[i])[5:] + "): expected .ir text in UTF-8"
		}
		i += n
	}
	return 0, ""
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "character '" + string(rune(c)) + "'"
	}
	const hex = "0123456789abcdef"
	return "byte 0x" + string([]byte{hex[c>>4], hex[c&15]})
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isIdent(c byte) bool  { return isLetter(c) || isDigit(c) || c == '.' }

// lexLine appends the tokens of line (without its newline) to toks[:0] and returns them,
// always ending with a tokEOL, placed just after the last token so that "unexpected end of
// line" points past what was written rather than at a comment or trailing blanks. A tokBad
// ends the line too: nothing after it can be trusted.
func lexLine(line []byte, toks []token) []token {
	toks = toks[:0]
	i := 0
	for i < len(line) {
		c := line[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '#':
			i = len(line)
			continue
		case isLetter(c):
			i = scanIdent(line, i)
			toks = append(toks, token{tokIdent, start + 1, line[start:i]})
		case startsNumber(line, i):
			i = scanNumber(line, i)
			toks = append(toks, token{tokNumber, start + 1, line[start:i]})
		case c == '"':
			end, ok := scanString(line, i)
			if !ok {
				return append(toks, token{tokBad, start + 1, line[start:end]}, token{tokEOL, end + 1, nil})
			}
			i = end
			toks = append(toks, token{tokString, start + 1, line[start:i]})
		case c == '<' && i+1 < len(line) && line[i+1] == '-':
			i += 2
			toks = append(toks, token{tokArrow, start + 1, line[start:i]})
		default:
			k := punct(c)
			if k == tokBad {
				_, n := utf8.DecodeRune(line[i:]) // a whole character, so describe can name it
				return append(toks, token{tokBad, start + 1, line[start : i+n]}, token{tokEOL, i + n + 1, nil})
			}
			i++
			toks = append(toks, token{k, start + 1, line[start:i]})
		}
	}
	eol := 1
	if n := len(toks); n > 0 {
		eol = toks[n-1].col + len(toks[n-1].text)
	}
	return append(toks, token{tokEOL, eol, nil})
}

func punct(c byte) tokKind {
	switch c {
	case '=':
		return tokEq
	case ',':
		return tokComma
	case ':':
		return tokColon
	case '[':
		return tokLBrack
	case ']':
		return tokRBrack
	}
	return tokBad
}

func scanIdent(line []byte, i int) int {
	for i < len(line) && isIdent(line[i]) {
		i++
	}
	return i
}

// startsNumber reports whether a number starts at i: a digit, a '.' before a digit, or a
// sign before either or before a letter (for -inf).
func startsNumber(line []byte, i int) bool {
	c := line[i]
	if c == '+' || c == '-' {
		i++
		if i == len(line) {
			return false
		}
		c = line[i]
		if isLetter(c) {
			return true
		}
	}
	return isDigit(c) || c == '.' && i+1 < len(line) && isDigit(line[i+1])
}

// scanNumber takes the longest run that could belong to a number (digits, letters, '.', and
// a sign only at the start or after an exponent mark); strconv decides later whether it is
// one, so "1.2.3" or "8x" become one malformed number rather than two confusing tokens.
func scanNumber(line []byte, i int) int {
	if line[i] == '+' || line[i] == '-' {
		i++
	}
	for i < len(line) {
		c := line[i]
		switch {
		case isIdent(c):
			i++
		case (c == '+' || c == '-') && (line[i-1] == 'e' || line[i-1] == 'E'):
			i++
		default:
			return i
		}
	}
	return i
}

// scanString returns the index just past the closing quote of the string starting at i, or
// the end of the line and false if it is not closed. Escapes are checked by strconv.Unquote.
func scanString(line []byte, i int) (int, bool) {
	for i++; i < len(line); i++ {
		switch line[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return len(line), false
}
