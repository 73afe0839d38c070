// JSON tokens: strings, numbers, literals, object keys and white space, as RFC 8259 spells them.
// Invariant: each function accepts a token exactly when json.Valid would (and a string only when it
// is valid UTF-8) and returns the index just past it; unescape decodes only what scanString
// accepted, appending to the caller's buffer.

package order

import (
	"unicode/utf8"
)

// plain marks the bytes a string can contain with no further checks.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// isSpace tests c <= ' ' first: in compact JSON, the common case, that one comparison answers.
func isSpace(c byte) bool { return c <= ' ' && (c == ' ' || c == '\t' || c == '\n' || c == '\r') }

func skipSpace(p []byte, i int) int {
	for i < len(p) && isSpace(p[i]) {
		i++
	}
	return i
}

// objectKey consumes `"key" :` and the space after it.
func objectKey(p []byte, i int) (int, bool) {
	if i >= len(p) || p[i] != '"' {
		return 0, false
	}
	i, _, ok := scanString(p, i)
	if !ok {
		return 0, false
	}
	i = skipSpace(p, i)
	if i >= len(p) || p[i] != ':' {
		return 0, false
	}
	return skipSpace(p, i+1), true
}

func literal(p []byte, i int, lit string) (int, bool) {
	if len(p)-i < len(lit) || string(p[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanString returns the index just past the closing quote of the string at
// p[i] and whether it contains escapes. It rejects control characters,
// malformed escapes and invalid UTF-8.
func scanString(p []byte, i int) (end int, escaped, ok bool) {
	i++
	for {
		for i < len(p) && plain[p[i]] {
			i++
		}
		if i >= len(p) {
			return 0, false, false
		}
		switch c := p[i]; {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(p) {
				return 0, false, false
			}
			switch p[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(p)-i < 6 || hexVal(p[i+2:i+6]) < 0 {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default:
			r, size := utf8.DecodeRune(p[i:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, false
			}
			i += size
		}
	}
}

// scanNumber returns the index just past the JSON number at p[i] and whether
// it is an integer (no fraction, no exponent). The caller checks what follows.
func scanNumber(p []byte, i int) (end int, integer, ok bool) {
	if i < len(p) && p[i] == '-' {
		i++
	}
	switch {
	case i >= len(p):
		return 0, false, false
	case p[i] == '0':
		i++
	case p[i]-'1' <= 8:
		i = digits(p, i+1)
	default:
		return 0, false, false
	}
	integer = true
	if i < len(p) && p[i] == '.' {
		j := digits(p, i+1)
		if j == i+1 {
			return 0, false, false
		}
		i, integer = j, false
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		j := digits(p, i)
		if j == i {
			return 0, false, false
		}
		i, integer = j, false
	}
	return i, integer, true
}

func digits(p []byte, i int) int {
	for i < len(p) && p[i]-'0' <= 9 {
		i++
	}
	return i
}

// hexVal decodes four hex digits, or returns -1.
func hexVal(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c-'0' <= 9:
			r = r<<4 | rune(c-'0')
		case c-'a' <= 5:
			r = r<<4 | rune(c-'a'+10)
		case c-'A' <= 5:
			r = r<<4 | rune(c-'A'+10)
		default:
			return -1
		}
	}
	return r
}

// unescape appends the decoded content of a string already validated by
// scanString. A lone surrogate is written as U+FFFD (as encoding/json does)
// and reported with ok == false so callers can refuse it instead.
func unescape(dst, s []byte) (out []byte, ok bool) {
	ok = true
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		switch e := s[i+1]; e {
		case 'u':
			r := hexVal(s[i+2:])
			i += 6
			if r >= 0xD800 && r < 0xDC00 && len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
				if lo := hexVal(s[i+2:]); lo >= 0xDC00 && lo < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					i += 6
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				r, ok = utf8.RuneError, false
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst = append(dst, unescapeByte[e])
			i += 2
		}
	}
	return dst, ok
}

var unescapeByte = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}
