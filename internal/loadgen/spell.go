// Spellings: how loadgen writes a record when Options.Escape asks for the input variety real
// producers write. Invariant: every spelling of a value means that value to any JSON decoder
// (encoding/json, relay's): a string unescapes to the same bytes, a number denotes the same exact
// decimal, a time the same millisecond (digits past it are floored, as docs/PIPELINES.md says), an
// object holds the same members; only the bytes on the wire differ. The choices come from their
// own random stream, so the values drawn are those of the same seed without Escape.

package loadgen

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/relay-sh/relay/internal/spec"
)

// decorations make a grouped string field's vocabulary non-ASCII: value k carries
// decorations[k%len] before its number. The NFD entry repeats the previous entry's text
// decomposed (e + U+0301 for é): the same visible text, another key, as relay compares bytes.
var decorations = []string{"", "café-", "cafe\u0301-", "Größe-", "日本語-", "😀-", "a/b&c<d>-", "Ünïçødé-"}

// nfdDecoration is the index of the decomposed entry in decorations.
const nfdDecoration = 2

// idSuffixes vary the order ids (ungrouped strings) the same way: seq%len picks one.
var idSuffixes = []string{"", "-ñ", "/東京", "-🎉"}

// String escaping styles, one per string written, as the encoders producers use write them.
const (
	styleRaw   = iota // encoding/json without HTML escaping, most encoders: raw UTF-8
	styleASCII        // Python's json.dumps (ensure_ascii): every non-ASCII rune \uxxxx, surrogate pairs past the BMP
	styleSlash        // PHP's json_encode, some Java encoders: "\/" and \uXXXX for non-ASCII
	styleHTML         // Go's encoding/json by default: <, >, & as \u003c, \u003e, \u0026
	styleMixed        // each rune at random raw or \u-escaped, ASCII letters too ("\u0073ku"), "\/"
)

// Whitespace styles, one per record.
const (
	wsCompact = iota // no whitespace
	wsPython         // ", " and ": ", as json.dumps by default
	wsPretty         // a member per line, indented
	wsRandom         // any JSON whitespace between any two tokens and around the record
)

// speller writes records with its own random stream.
type speller struct {
	rng *rand.Rand
	ws  int // this record's whitespace style
}

func newSpeller(seed uint64) *speller {
	return &speller{rng: rand.New(rand.NewPCG(seed^0x5bd1e995, seed+0x2545f4914f6cdd1d))}
}

// record writes the object of layout, field i having the drawn value vals[i] (see Generator.raw).
func (s *speller) record(dst []byte, layout []node, fields []spec.InputField, vals []string) []byte {
	s.ws = [...]int{wsCompact, wsCompact, wsPython, wsPython, wsPretty, wsRandom}[s.rng.IntN(6)]
	dst = s.space(dst, false)
	dst = s.object(dst, layout, fields, vals, 1)
	return s.space(dst, false)
}

// object writes the members of layout in a random order half of the time.
func (s *speller) object(dst []byte, layout []node, fields []spec.InputField, vals []string, depth int) []byte {
	order := make([]int, len(layout))
	for i := range order {
		order[i] = i
	}
	if s.rng.IntN(2) == 0 {
		s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	}
	dst = append(dst, '{')
	for j, k := range order {
		if j > 0 {
			dst = s.space(dst, false)
			dst = append(dst, ',')
		}
		dst = s.newline(dst, depth)
		n := layout[k]
		dst = s.key(dst, n.key)
		dst = s.space(dst, false)
		dst = append(dst, ':')
		dst = s.space(dst, true)
		if n.field >= 0 {
			dst = s.value(dst, &fields[n.field], vals[n.field])
		} else {
			dst = s.object(dst, n.kids, fields, vals, depth+1)
		}
	}
	dst = s.newline(dst, depth-1)
	return append(dst, '}')
}

// space is the whitespace of the record's style between two tokens: after a colon Python's and
// pretty's one space, anywhere any whitespace in the random style.
func (s *speller) space(dst []byte, afterColon bool) []byte {
	switch s.ws {
	case wsPython, wsPretty:
		if afterColon {
			dst = append(dst, ' ')
		}
	case wsRandom:
		for range s.rng.IntN(3) {
			dst = append(dst, [...]string{" ", "\t", "\n", "\r\n"}[s.rng.IntN(4)]...)
		}
	}
	return dst
}

// newline starts a member (or closes an object) in the record's style: Python's space after a
// comma, pretty's line and indent.
func (s *speller) newline(dst []byte, depth int) []byte {
	switch s.ws {
	case wsPython:
		if depth > 0 && len(dst) > 0 && dst[len(dst)-1] == ',' {
			dst = append(dst, ' ')
		}
	case wsPretty:
		dst = append(dst, '\n')
		dst = append(dst, strings.Repeat("  ", max(depth, 0))...)
	case wsRandom:
		dst = s.space(dst, false)
	}
	return dst
}

// key writes a member name: mostly as is, a fifth of the time with escapes ("\u0073ku" for sku).
func (s *speller) key(dst []byte, k string) []byte {
	style := styleRaw
	if s.rng.IntN(5) == 0 {
		style = styleMixed
	}
	return s.quote(dst, k, style)
}

// value writes field f's drawn value v in one of the spellings its kind allows.
func (s *speller) value(dst []byte, f *spec.InputField, v string) []byte {
	switch f.Kind {
	case spec.KindString:
		return s.str(dst, v)
	case spec.KindDecimal:
		return s.decimal(dst, v)
	case spec.KindInt, spec.KindEpochMS:
		return s.integer(dst, v)
	}
	ms, _ := strconv.ParseInt(v, 10, 64)
	return s.numStr(dst, s.rfc3339(ms))
}

// str writes v as a JSON string in a random escaping style.
func (s *speller) str(dst []byte, v string) []byte {
	return s.quote(dst, v, [...]int{styleRaw, styleRaw, styleRaw, styleASCII, styleASCII, styleSlash, styleHTML, styleMixed, styleMixed}[s.rng.IntN(9)])
}

// numStr writes a number or a time as a JSON string: escapes in one are valid but rare (no
// encoder escapes ASCII), so one in eight.
func (s *speller) numStr(dst []byte, v string) []byte {
	if s.rng.IntN(8) == 0 {
		return s.quote(dst, v, styleMixed)
	}
	return s.quote(dst, v, styleRaw)
}

// quote writes v (valid UTF-8) as a JSON string in style.
func (s *speller) quote(dst []byte, v string, style int) []byte {
	dst = append(dst, '"')
	for _, r := range v {
		esc := false
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
			continue
		case r < 0x20:
			esc = true
		case style == styleMixed:
			esc = s.rng.IntN(2) == 0
		case r >= utf8.RuneSelf:
			esc = style == styleASCII || style == styleSlash
		case r == '/':
			if style == styleSlash {
				dst = append(dst, '\\', '/')
				continue
			}
		case r == '<' || r == '>' || r == '&':
			esc = style == styleHTML
		}
		if !esc {
			dst = utf8.AppendRune(dst, r)
			continue
		}
		if r == '/' && s.rng.IntN(2) == 0 {
			dst = append(dst, '\\', '/')
			continue
		}
		upper := style == styleSlash || style == styleMixed && s.rng.IntN(2) == 0
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			dst = appendU(appendU(dst, hi, upper), lo, upper)
		} else {
			dst = appendU(dst, r, upper)
		}
	}
	return append(dst, '"')
}

// appendU writes \uXXXX of the UTF-16 unit r.
func appendU(dst []byte, r rune, upper bool) []byte {
	digits := "0123456789abcdef"
	if upper {
		digits = "0123456789ABCDEF"
	}
	return append(dst, '\\', 'u', digits[r>>12&15], digits[r>>8&15], digits[r>>4&15], digits[r&15])
}

// decimal writes the decimal v ("-12.34") as a number or a string, as written, with trailing
// zeros, with an exponent (1234e-2, 1.234E+1) or, in a string, with leading zeros ("0012.34").
func (s *speller) decimal(dst []byte, v string) []byte {
	sign := v[:len(v)-len(strings.TrimPrefix(v, "-"))]
	intp, frac, _ := strings.Cut(v[len(sign):], ".")
	digits := strings.TrimLeft(intp+frac, "0")
	quoted := s.rng.IntN(2) == 0
	e := [...]string{"e", "E"}[s.rng.IntN(2)]
	text := v
	switch s.rng.IntN(5) {
	case 1:
		if frac == "" {
			text += "."
		}
		text += strings.Repeat("0", 1+s.rng.IntN(3))
	case 2:
		if digits == "" {
			text = sign + "0" + e + "0"
		} else {
			text = sign + digits + e + strconv.Itoa(-len(frac))
		}
	case 3:
		if digits != "" {
			exp := len(digits) - 1 - len(frac)
			text = sign + digits[:1]
			if len(digits) > 1 {
				text += "." + digits[1:]
			}
			text += e
			if exp >= 0 && s.rng.IntN(2) == 0 {
				text += "+"
			}
			text += strconv.Itoa(exp)
		}
	case 4:
		if quoted { // JSON numbers have no leading zeros; relay's decimal strings may
			text = sign + "00" + v[len(sign):]
		}
	}
	if quoted {
		return s.numStr(dst, text)
	}
	return append(dst, text...)
}

// integer writes the integer v as a number, a string, or a string with leading zeros.
func (s *speller) integer(dst []byte, v string) []byte {
	switch s.rng.IntN(4) {
	case 0, 1:
		return append(dst, v...)
	case 2:
		return s.numStr(dst, v)
	}
	sign := v[:len(v)-len(strings.TrimPrefix(v, "-"))]
	return s.numStr(dst, sign+"00"+v[len(sign):])
}

// offsets are the UTC offsets (minutes) an RFC 3339 time is written in; 0 appears as Z and +00:00.
var offsets = []int{0, 0, 60, -300, 330, 345, -570, 840, -720}

// rfc3339 spells the millisecond ms in a random offset with a fraction of 0 to 9 digits (digits
// past the millisecond are noise relay floors away; no fraction only on a whole second).
func (s *speller) rfc3339(ms int64) string {
	off := offsets[s.rng.IntN(len(offsets))]
	t := time.UnixMilli(ms).In(time.FixedZone("", off*60))
	b := t.AppendFormat(nil, "2006-01-02T15:04:05")
	frac := strconv.Itoa(int(ms%1000) + 1000)[1:] // three digits
	switch s.rng.IntN(4) {
	case 0:
		frac = strings.TrimRight(frac, "0")
	case 1:
		frac += strconv.Itoa(s.rng.IntN(1000000) + 1000000)[1 : 1+s.rng.IntN(6)+1]
	}
	if frac != "" {
		b = append(append(b, '.'), frac...)
	}
	if off == 0 && s.rng.IntN(2) == 0 {
		return string(append(b, 'Z'))
	}
	return string(t.AppendFormat(b, "-07:00"))
}

// fitTail is the longest tail of v within n bytes that starts on a rune.
func fitTail(v string, n int) string {
	i := max(0, len(v)-n)
	for i < len(v) && !utf8.RuneStart(v[i]) {
		i++
	}
	return v[i:]
}

// fitHead is the longest head of v within n bytes that ends on a rune.
func fitHead(v string, n int) string {
	if len(v) <= n {
		return v
	}
	i := n
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i]
}
