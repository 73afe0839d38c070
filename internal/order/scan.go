// The scanner accepts exactly what json.Valid accepts, plus the requirement
// that the payload be valid UTF-8 (RFC 8259 section 8.1), which json.Valid
// does not check inside strings. It only records where the four wanted values
// are; it never interprets a value it is not asked for.

package order

import (
	"math/bits"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit; past it json.Valid fails, so the
// scanner must too.
const maxDepth = 10000

type kind uint8

const (
	kindNone kind = iota // key not seen
	kindString
	kindNumber
	kindBool
	kindNull
	kindObject
	kindArray
)

// value locates the last occurrence of a wanted field (last one wins, as in
// encoding/json). For strings start:end excludes the quotes.
type value struct {
	start, end int
	kind       kind
	escaped    bool // string contains backslash escapes
	integer    bool // number has neither fraction nor exponent
}

// plain marks the bytes a string can contain with no further checks.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(p []byte, i int) int {
	for i < len(p) && isSpace(p[i]) {
		i++
	}
	return i
}

// scan validates the whole payload and records the wanted fields of the
// top-level object in d.vals.
func (d *Decoder) scan(p []byte) Reason {
	d.vals = [numFields]value{}
	i := skipSpace(p, 0)
	if i == len(p) {
		return ReasonNotJSON
	}
	if p[i] != '{' {
		// Malformed input must say not_json even when it does not start
		// like an object, so validate before classifying.
		j, ok := d.skipValue(p, i, 0)
		if !ok || skipSpace(p, j) != len(p) {
			return ReasonNotJSON
		}
		return ReasonNotObject
	}
	i = skipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		i++
	} else {
		for {
			if i >= len(p) || p[i] != '"' {
				return ReasonNotJSON
			}
			end, escaped, ok := scanString(p, i)
			if !ok {
				return ReasonNotJSON
			}
			want := d.match(p[i+1:end-1], escaped)
			i = skipSpace(p, end)
			if i >= len(p) || p[i] != ':' {
				return ReasonNotJSON
			}
			i = skipSpace(p, i+1)
			if i >= len(p) {
				return ReasonNotJSON
			}
			var v value
			switch c := p[i]; {
			case c == '"':
				end, v.escaped, ok = scanString(p, i)
				v.start, v.end, v.kind = i+1, end-1, kindString
			case c == '-' || c-'0' <= 9:
				end, v.integer, ok = scanNumber(p, i)
				v.start, v.end, v.kind = i, end, kindNumber
			default:
				v.kind = kinds[c]
				end, ok = d.skipValue(p, i, 1)
			}
			if !ok {
				return ReasonNotJSON
			}
			for ; want != 0; want &= want - 1 {
				d.vals[bits.TrailingZeros8(want)] = v
			}
			i = skipSpace(p, end)
			if i >= len(p) {
				return ReasonNotJSON
			}
			if p[i] == ',' {
				i = skipSpace(p, i+1)
				continue
			}
			if p[i] != '}' {
				return ReasonNotJSON
			}
			i++
			break
		}
	}
	if skipSpace(p, i) != len(p) {
		return ReasonNotJSON
	}
	return OK
}

// kinds classifies a value by its first byte (strings and numbers are
// handled before this is consulted).
var kinds = [256]kind{'{': kindObject, '[': kindArray, 't': kindBool, 'f': kindBool, 'n': kindNull}

// match reports which fields a key names, one bit per field. Several fields
// may share a name; then one value feeds them all.
func (d *Decoder) match(key []byte, escaped bool) (want uint8) {
	if escaped {
		var ok bool
		d.keyBuf, ok = unescape(d.keyBuf[:0], key)
		if !ok {
			// A key with a lone surrogate is not a Unicode string, so it
			// cannot equal any field name.
			return 0
		}
		key = d.keyBuf
	}
	for f, name := range d.names {
		if len(key) == len(name) && string(key) == name {
			want |= 1 << f
		}
	}
	return want
}

// skipValue returns the index just past the JSON value at p[i], or false if
// it is malformed. depth counts the containers already open around it.
func (d *Decoder) skipValue(p []byte, i, depth int) (int, bool) {
	base := depth
	for {
		// p[i] should start a value.
		if i >= len(p) {
			return 0, false
		}
		ok := true
		switch c := p[i]; c {
		case '"':
			i, _, ok = scanString(p, i)
		case '{', '[':
			depth++
			if depth > maxDepth {
				return 0, false
			}
			d.setTop(depth, c == '{')
			i = skipSpace(p, i+1)
			if i < len(p) && p[i] == c+2 { // '{'+2 == '}', '['+2 == ']'
				i++
				depth--
				break
			}
			if c == '{' {
				if i, ok = objectKey(p, i); !ok {
					return 0, false
				}
			}
			continue
		case 't':
			i, ok = literal(p, i, "true")
		case 'f':
			i, ok = literal(p, i, "false")
		case 'n':
			i, ok = literal(p, i, "null")
		default:
			if c != '-' && c-'0' > 9 {
				return 0, false
			}
			i, _, ok = scanNumber(p, i)
		}
		if !ok {
			return 0, false
		}
		// A value just ended: close containers until one continues.
		for {
			if depth == base {
				return i, true
			}
			i = skipSpace(p, i)
			if i >= len(p) {
				return 0, false
			}
			obj := d.top(depth)
			if p[i] == ',' {
				i = skipSpace(p, i+1)
				if obj {
					if i, ok = objectKey(p, i); !ok {
						return 0, false
					}
				}
				break
			}
			if obj && p[i] == '}' || !obj && p[i] == ']' {
				i++
				depth--
				continue
			}
			return 0, false
		}
	}
}

func (d *Decoder) setTop(depth int, obj bool) {
	w, b := depth/64, uint(depth%64)
	if obj {
		d.stack[w] |= 1 << b
	} else {
		d.stack[w] &^= 1 << b
	}
}

func (d *Decoder) top(depth int) bool {
	return d.stack[depth/64]&(1<<uint(depth%64)) != 0
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
