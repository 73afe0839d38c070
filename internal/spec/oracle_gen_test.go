// The differential test's record generator. Invariant: a record depends only on the spec and the
// seed (so a failing sequence replays exactly), and the generator makes every shape the test must
// see: keys that collide, every encoding JSON allows for the same value, and every kind of bad value.

package spec

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// gen makes records of one spec: mostly valid, with keys that collide (a small vocabulary per
// field, a few windows), in every encoding JSON allows, and every kind of bad value.
type gen struct {
	rng    *rand.Rand
	clean  bool // this record gets only valid values (in any encoding)
	fields []InputField
	lim    Limits
	bases  []int64 // event times records cluster around
}

func newGen(s diffSpec, seed uint64) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 23)), fields: s.plan.InputFields(), lim: s.limits}
	for range 3 {
		g.bases = append(g.bases, g.lim.MinTS+g.rng.Int64N(g.lim.MaxTS-g.lim.MinTS))
	}
	for _, b := range []int64{g.lim.MinTS, g.lim.MaxTS - 1, 0, 1764000000000} {
		if b >= g.lim.MinTS && b < g.lim.MaxTS {
			g.bases = append(g.bases, b)
		}
	}
	return g
}

func (g *gen) pick(n int) int        { return g.rng.IntN(n) }
func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

// member is one member of an object being built; val is raw JSON or a nested *object.
type member struct {
	key string
	val any
}

type object struct{ members []member }

// set puts raw at path, creating the objects on the way (or reusing one already there).
func (o *object) set(path []string, raw string) {
	for _, k := range path[:len(path)-1] {
		var next *object
		for _, m := range o.members {
			if sub, ok := m.val.(*object); ok && m.key == k {
				next = sub
			}
		}
		if next == nil {
			next = &object{}
			o.members = append(o.members, member{key: k, val: next})
		}
		o = next
	}
	o.members = append(o.members, member{key: path[len(path)-1], val: raw})
}

// record makes one payload.
func (g *gen) record() []byte {
	var o object
	g.clean = g.chance(0.6)
	for _, f := range g.fields {
		if !g.clean && g.chance(0.02) { // absent
			continue
		}
		var raw string
		switch f.Kind {
		case KindString:
			raw = g.str(f)
		case KindInt:
			raw = g.integer(false)
		case KindDecimal:
			raw = g.decimal(f.Scale)
		case KindEpochMS:
			raw = g.epoch()
		default:
			raw = g.rfc3339()
		}
		if !g.clean && g.chance(0.02) {
			raw = []string{"null", "true", "[]", "{}", `{"x":1}`, "0", `""`}[g.pick(7)]
		}
		o.set(f.Path, raw)
	}
	var b strings.Builder
	ws := g.chance(0.1)
	g.render(&b, &o, ws, 0)
	p := b.String()
	switch {
	case g.clean:
	case g.chance(0.01):
		p = " \t\r\n" + p + "\n "
	case g.chance(0.005):
		p = p[:g.pick(len(p))] // not JSON
	case g.chance(0.005):
		p = "[" + p + "]"
	case g.chance(0.005):
		p = "\xef\xbb\xbf" + p // a byte order mark: not JSON
	case g.chance(0.01):
		// Near the size limit, on either side.
		pad := g.lim.MaxPayloadBytes - len(p) - len(`,"pad":""`) + g.pick(3) - 1
		if pad >= 0 {
			p = p[:len(p)-1] + `,"pad":"` + strings.Repeat("x", pad) + `"}`
		}
	}
	return []byte(p)
}

// render writes o with its members in random order, keys in random encodings, sometimes a
// path's object replaced by another type, duplicate members (the last one wins) and junk.
func (g *gen) render(b *strings.Builder, o *object, ws bool, depth int) {
	ms := slices.Clone(o.members)
	if g.chance(0.2) {
		g.rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	}
	if g.chance(0.1) && len(ms) > 0 { // a duplicate: its value decoy, before or after
		m := ms[g.pick(len(ms))]
		d := member{key: m.key, val: []string{"null", `"dup"`, "12", `{"b":"x","c":1}`, `"é"`}[g.pick(5)]}
		if g.chance(0.5) {
			ms = append([]member{d}, ms...)
		} else {
			ms = append(ms, d)
		}
	}
	if g.chance(0.1) {
		junk := []member{{"zz", `[1,{"a":null},"\ud800"]`}, {"", `""`}, {"s\\ud800ku", `"x"`}, {"meta", `{"at":5}`},
			{"ts\u0000", "1"}, {"nested", `{"a":{"b":{"c":[[],{}]}}}`}, {"\\u0000", "true"}, {"order_idx", `"zz"`},
			{"skU", `"zz"`}, {"amount_", "5"}, {"long_name_fiel", "5"}, {"long_name_fieldd", "5"}}
		ms = slices.Insert(ms, g.pick(len(ms)+1), junk[g.pick(len(junk))])
	}
	sp := ""
	if ws {
		sp = []string{" ", "\t", "\r\n  ", " \n"}[g.pick(4)] // all the whitespace JSON allows
	}
	b.WriteString("{" + sp)
	for i, m := range ms {
		if i > 0 {
			b.WriteString("," + sp)
		}
		b.WriteString(g.key(m.key) + sp + ":" + sp)
		switch v := m.val.(type) {
		case string:
			b.WriteString(v)
		case *object:
			if g.chance(0.02) {
				b.WriteString([]string{"null", `"x"`, "[]", "7"}[g.pick(4)])
			} else {
				g.render(b, v, ws, depth+1)
			}
		}
	}
	b.WriteString(sp + "}")
}

// key encodes a member name, sometimes escaping some of its characters (as \u0073ku).
func (g *gen) key(k string) string {
	if strings.Contains(k, "\\") { // junk already written as JSON
		return `"` + k + `"`
	}
	if g.chance(0.15) {
		return g.quote(k, 2)
	}
	return g.quote(k, 0)
}

// quote writes s as a JSON string: mode 0 plain (escaping only what JSON requires), 1 every
// non-ASCII character as \u escapes (surrogate pairs past the BMP, as Python's json.dumps does),
// 2 random characters escaped in random forms (\u00e9, \u00E9, \/, \u0073).
func (g *gen) quote(s string, mode int) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		esc := mode == 2 && g.chance(0.5) || mode == 1 && r >= 0x80
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r == '/' && (mode == 2 || g.chance(0.5)):
			b.WriteString(`\/`)
		case r < 0x20 || esc:
			if short, ok := shortEscapes[r]; ok && g.chance(0.5) {
				b.WriteString(short)
				break
			}
			hex := "%04x"
			if g.chance(0.3) {
				hex = "%04X"
			}
			if r > 0xFFFF {
				r -= 0x10000
				fmt.Fprintf(&b, `\u`+hex+`\u`+hex, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			} else {
				fmt.Fprintf(&b, `\u`+hex, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

var shortEscapes = map[rune]string{'\n': `\n`, '\t': `\t`, '\b': `\b`, '\f': `\f`, '\r': `\r`}

// vocabulary are strings that collide on purpose: escaped and raw forms of one text, NFC and NFD
// forms of é (different bytes, so different keys), characters past the BMP, NUL, '/'.
var vocabulary = []string{"A", "sku-A", "a", "A ", "café", "cafe\u0301", "é", "e\u0301", "😀", "s3é", "x\x00y", "\x00",
	"a/b", "paid", "1", "日本", "\u00e9\u00e9", "\"q\"", "\\", "tab\tx", "ü"}

func (g *gen) str(f InputField) string {
	n := g.pick(100)
	if g.clean && n < 10 {
		n = 2 * g.pick(2)
	}
	switch {
	case n < 4: // at the byte bound and one past it, in multi-byte characters
		s := strings.Repeat("é", f.Max/2)
		if len(s) < f.Max {
			s += "a"
		}
		if n%2 == 1 {
			s += []string{"a", "é", "😀"}[g.pick(3)]
		}
		return g.quote(s, g.pick(3))
	case n < 6:
		return []string{`"\ud800"`, `"a\udc00"`, `"\ud83d"`, `"\ud83dx"`, `"\ude00\ud83d"`, `"\ud83d\ud83d\ude00"`, `"\uDBFF\uDFFF"`}[g.pick(7)]
	case n < 8: // invalid UTF-8 or a raw control character: not JSON
		return `"` + []string{"a\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x01b", "\x7f"}[g.pick(7)] + `"`
	case n < 9:
		return `""`
	case n < 10:
		return []string{"1", "1.5", "true", "[]", `{"a":"b"}`}[g.pick(5)]
	}
	var s string
	if f.Filter != nil && g.chance(0.5) {
		s = f.Filter[g.pick(len(f.Filter))]
	} else if f.Grouped || g.chance(0.5) {
		s = vocabulary[g.pick(len(vocabulary))]
	} else {
		s = fmt.Sprintf("o-%d", g.pick(1000000))
	}
	if len(s) > f.Max && g.chance(0.7) {
		s = s[:f.Max]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		if s == "" {
			s = "Z"
		}
	}
	return g.quote(s, g.pick(3))
}

// integer makes an int or epoch_ms value: mostly small and colliding, with the int64 edges, and
// every form JSON and relay treat differently (strings of digits, floats, exponents, signs).
func (g *gen) integer(event bool) string {
	if (g.clean || g.chance(0.85)) && !event {
		n := int64(g.pick(5)) - 1
		if g.chance(0.3) {
			n = g.rng.Int64N(2000) - 1000
		}
		s := strconv.FormatInt(n, 10)
		if g.chance(0.2) {
			return g.quote(s, g.pick(3))
		}
		return s
	}
	forms := []string{"9223372036854775807", "-9223372036854775808", "9223372036854775808", "-9223372036854775809",
		`"9223372036854775807"`, `"-9223372036854775808"`, `"9223372036854775808"`, "-0", `"-0"`, `"007"`, `"+5"`,
		"1.0", "1e3", "1E3", `"1e3"`, `"1.0"`, `" 5"`, `"5 "`, `""`, `"-"`, "true", "{}", "[]", `"\u0031\u0032"`,
		`"0x10"`, `"١"`, "12345678901234567890123"}
	return forms[g.pick(len(forms))]
}

// decimal makes a decimal(scale) value: mostly exact at the scale in every number form, with the
// precision, range and syntax edges.
func (g *gen) decimal(scale int) string {
	if g.clean || g.chance(0.8) {
		m := min(1000000, g.lim.MaxUnits/pow10(4-scale))
		units := g.rng.Int64N(2*m+1) - m
		if g.chance(0.2) {
			units = int64(g.pick(5)) - 2
		}
		lit := new(big.Rat).SetFrac64(units, pow10(scale)).FloatString(scale)
		switch g.pick(6) {
		case 0: // an exponent form of the same value
			digits := strings.Replace(lit, ".", "", 1)
			lit = digits + "e-" + strconv.Itoa(scale)
			if g.chance(0.5) {
				lit = digits + "0E-" + strconv.Itoa(scale+1)
			}
		case 1: // trailing zeros
			if !strings.Contains(lit, ".") {
				lit += "."
			}
			lit += strings.Repeat("0", 1+g.pick(8))
		case 2: // leading zeros, only inside a string
			if !strings.HasPrefix(lit, "-") {
				return g.quote("00"+lit, 0)
			}
		}
		if g.chance(0.4) {
			return g.quote(lit, g.pick(3))
		}
		return lit
	}
	max := new(big.Rat).SetFrac64(g.lim.MaxUnits, 10000)
	over := new(big.Rat).Add(max, big.NewRat(1, pow10(scale)))
	forms := []string{max.FloatString(4), "-" + max.FloatString(4), over.FloatString(scale), "-" + over.FloatString(scale),
		`"` + max.FloatString(scale) + `"`, "-0", `"-0"`, "-0.0", "0e999999999", "1e999999999", "1e-999999999",
		"0.00001", "1.23456", "1.234", "0.1", "0.10", "1e-4", "1e-5", "12345e-6", "922337203685477.5808",
		"-922337203685477.5808", "1e18", "9.999999999999999999e14", `"1.5e1"`, `".5"`, `"5."`, `"+1"`, `"1e"`, `"0x1"`,
		`"NaN"`, `""`, `" 1"`, `"1 "`, `"١"`, "true", "[]", "{}", `"\u0031.5"`, `"1.5\u0000"`, "0.5E+1", "5E-1"}
	return forms[g.pick(len(forms))]
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// eventMS is an event time near one of the bases, often on a window edge.
func (g *gen) eventMS() int64 {
	b := g.bases[g.pick(len(g.bases))]
	switch g.pick(4) {
	case 0:
		return b
	case 1:
		return b - b%60000 - int64(g.pick(2)) // a minute edge, or 1 ms before it
	}
	t := b + g.rng.Int64N(7200000) - 3600000
	if g.clean {
		t = min(max(t, g.lim.MinTS), g.lim.MaxTS-1)
	}
	return t
}

func (g *gen) epoch() string {
	if !g.clean && g.chance(0.1) {
		return g.integer(true)
	}
	ms := g.eventMS()
	s := strconv.FormatInt(ms, 10)
	if g.chance(0.2) {
		return g.quote(s, g.pick(3))
	}
	return s
}

func (g *gen) rfc3339() string {
	if !g.clean && g.chance(0.1) {
		bad := []string{"2025-11-24t16:30:00z", "2025-11-24T16:30:00+24:00", "2025-11-24T16:30:00+2400", "2025-11-24 16:30:00Z",
			"2025-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2025-11-24T24:00:00Z", "2025-12-31T23:59:60Z", "2025-11-24T16:30Z",
			"2025-11-24T16:30:00.Z", "2025-11-24T16:30:00", "2025-11-24T16:30:00-00:00", "2025-11-24T16:30:00+23:59",
			"1969-12-31T23:59:59.9999999Z", "0000-01-01T00:00:00Z", "2025-13-01T00:00:00Z", "+2025-11-24T16:30:00Z",
			"1600-02-29T12:00:00Z", "1700-02-29T12:00:00Z", "1900-02-29T12:00:00Z", "2000-02-29T12:00:00Z", "2100-02-29T12:00:00Z",
			"1000-01-01T00:00:00Z", "1000-01-01T00:59:59+01:00", "9999-12-30T23:59:59.999Z", "9999-12-31T00:00:00Z",
			"1582-10-10T00:00:00Z", "0999-12-31T23:59:59Z"}
		if g.chance(0.2) {
			return []string{"1764000000000", "true", "null", "[]"}[g.pick(4)]
		}
		return g.quote(bad[g.pick(len(bad))], g.pick(3))
	}
	ms := g.eventMS()
	off := 0
	if g.chance(0.5) {
		off = (g.pick(47) - 23) * 60
		off += []int{0, 30, 45, 59}[g.pick(4)] * sign(off)
	}
	t := time.UnixMilli(ms).UTC().Add(time.Duration(g.rng.Int64N(1000000)) * time.Duration(g.pick(2)))
	t = t.In(time.FixedZone("", off*60))
	frac := ""
	if n := g.pick(13); n > 0 {
		frac = "." + fmt.Sprintf("%09d", t.Nanosecond())[:min(n, 9)] + strings.Repeat("7", max(0, n-9))
	}
	s := t.Format("2006-01-02T15:04:05") + frac
	if off == 0 && g.chance(0.7) {
		s += "Z"
	} else {
		s += t.Format("-07:00")
	}
	return g.quote(s, g.pick(3))
}

func sign(n int) int {
	if n < 0 {
		return -1
	}
	return 1
}
