// The scanner accepts exactly what json.Valid accepts, plus the requirement
// that the payload be valid UTF-8 (RFC 8259 section 8.1), which json.Valid
// does not check inside strings. It only records where the wanted values are;
// it never interprets a value it is not asked for.

package order

import (
	"encoding/binary"
	"slices"
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
	kindNotObject // a key on the field's path holds something other than an object
)

// value locates the last occurrence of a wanted field (last one wins, as in
// encoding/json). For strings start:end excludes the quotes.
type value struct {
	start, end int
	kind       kind
	escaped    bool // string contains backslash escapes
	integer    bool // number has neither fraction nor exponent
}

// Scanner finds the values of a fixed set of fields, each named by a path of
// object keys from the top level ({"customer":{"region":…}} is the path
// customer, region), while validating the whole payload. It is the one JSON
// scanner of relay: the fixed order Decoder and the spec-driven decoder both
// run on it. Not safe for concurrent use.
type Scanner struct {
	root node
	vals []value
	// Unescaped strings live here, one buffer per field, so several fields
	// can alias scratch memory at once.
	scratch [][]byte
	keyBuf  []byte
	// stack has one bit per open container (1 = object) for skipping nested
	// values without recursion; its size is the depth json.Valid allows.
	stack [maxDepth/64 + 1]uint64
}

// node is one key of the path trie. Fields sharing a path share a node; a
// key can be both a field and the parent of others.
type node struct {
	name  string
	head  uint64 // name's first eight bytes, little-endian, zero-padded (see match)
	leaf  []int  // fields whose path ends here
	under []int  // fields whose path continues below here
	kids  []node
	next  int // the kid after the one matched last: where match starts looking
}

// NewScanner returns a Scanner for fields whose paths are given in field
// order; a path has at least one key.
func NewScanner(paths [][]string) *Scanner {
	s := &Scanner{vals: make([]value, len(paths)), scratch: make([][]byte, len(paths)), keyBuf: make([]byte, 0, 32)}
	for f, path := range paths {
		s.scratch[f] = make([]byte, 0, 64)
		n := &s.root
		for depth, key := range path {
			k := slices.IndexFunc(n.kids, func(c node) bool { return c.name == key })
			if k < 0 {
				n.kids = append(n.kids, node{name: key, head: head([]byte(key))})
				k = len(n.kids) - 1
			}
			n = &n.kids[k]
			if depth < len(path)-1 {
				n.under = append(n.under, f)
			}
		}
		n.leaf = append(n.leaf, f)
	}
	return s
}

// Scan validates the whole payload and records where the fields are. It
// returns OK, ReasonNotJSON or ReasonNotObject.
func (s *Scanner) Scan(p []byte) Reason {
	clear(s.vals)
	i := skipSpace(p, 0)
	if i == len(p) {
		return ReasonNotJSON
	}
	if p[i] != '{' {
		// Malformed input must say not_json even when it does not start
		// like an object, so validate before classifying.
		j, ok := s.skipValue(p, i, 0)
		if !ok || skipSpace(p, j) != len(p) {
			return ReasonNotJSON
		}
		return ReasonNotObject
	}
	i, ok := s.object(p, i, &s.root, 1)
	if !ok || skipSpace(p, i) != len(p) {
		return ReasonNotJSON
	}
	return OK
}

// object scans the object at p[i] (its '{'), recording the fields below n,
// and returns the index just past its '}'. depth counts the containers open,
// this one included.
func (s *Scanner) object(p []byte, i int, n *node, depth int) (int, bool) {
	i = skipSpace(p, i+1)
	if i < len(p) && p[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(p) || p[i] != '"' {
			return 0, false
		}
		end, escaped, ok := scanString(p, i)
		if !ok {
			return 0, false
		}
		kid := s.match(n, p[i+1:end-1], escaped)
		i = skipSpace(p, end)
		if i >= len(p) || p[i] != ':' {
			return 0, false
		}
		i = skipSpace(p, i+1)
		if i >= len(p) {
			return 0, false
		}
		var v value
		switch c := p[i]; {
		case c == '"':
			end, v.escaped, ok = scanString(p, i)
			v.start, v.end, v.kind = i+1, end-1, kindString
		case c == '-' || c-'0' <= 9:
			end, v.integer, ok = scanNumber(p, i)
			v.start, v.end, v.kind = i, end, kindNumber
		case c == '{' && kid != nil && len(kid.kids) > 0:
			// A repeated key replaces the whole object, as in encoding/json.
			for _, f := range kid.under {
				s.vals[f] = value{}
			}
			if depth+1 > maxDepth {
				return 0, false
			}
			v.kind = kindObject
			end, ok = s.object(p, i, kid, depth+1)
		default:
			v.kind = kinds[c]
			end, ok = s.skipValue(p, i, depth)
		}
		if !ok {
			return 0, false
		}
		if kid != nil {
			for _, f := range kid.leaf {
				s.vals[f] = v
			}
			if v.kind != kindObject {
				// The path stops here: null means the fields below are
				// missing, anything else that they have the wrong type.
				below := value{kind: kindNotObject}
				if v.kind == kindNull {
					below.kind = kindNull
				}
				for _, f := range kid.under {
					s.vals[f] = below
				}
			}
		}
		i = skipSpace(p, end)
		if i >= len(p) {
			return 0, false
		}
		if p[i] == ',' {
			i = skipSpace(p, i+1)
			continue
		}
		if p[i] != '}' {
			return 0, false
		}
		return i + 1, true
	}
}

// kinds classifies a value by its first byte (strings and numbers are
// handled before this is consulted).
var kinds = [256]kind{'{': kindObject, '[': kindArray, 't': kindBool, 'f': kindBool, 'n': kindNull}

// match returns the child of n a key names, or nil.
func (s *Scanner) match(n *node, key []byte, escaped bool) *node {
	if escaped {
		var ok bool
		s.keyBuf, ok = unescape(s.keyBuf[:0], key)
		if !ok {
			// A key with a lone surrogate is not a Unicode string, so it
			// cannot equal any field name.
			return nil
		}
		key = s.keyBuf
	}
	// One word compare per candidate instead of a call to the runtime's memequal: field names are
	// mostly eight bytes or shorter, so the head decides, and only a longer name compares its rest.
	// The search starts after the last match: records of one topic keep their keys in one order,
	// so the key wanted next is usually the first one tried.
	h, k := head(key), n.next
	for range n.kids {
		if k == len(n.kids) {
			k = 0
		}
		if kid := &n.kids[k]; kid.head == h && len(key) == len(kid.name) && (len(key) <= 8 || string(key[8:]) == kid.name[8:]) {
			n.next = k + 1
			return kid
		}
		k++
	}
	return nil
}

// head is the first eight bytes of key, little-endian, zero-padded. It reads them in one load when
// key's capacity allows (a key inside a payload usually has its closing quote and more after it).
func head(key []byte) uint64 {
	if cap(key) < 8 {
		var b [8]byte
		copy(b[:], key)
		return binary.LittleEndian.Uint64(b[:])
	}
	w := binary.LittleEndian.Uint64(key[:8])
	if len(key) < 8 {
		w &= 1<<(8*len(key)) - 1
	}
	return w
}

// skipValue returns the index just past the JSON value at p[i], or false if
// it is malformed. depth counts the containers already open around it.
func (s *Scanner) skipValue(p []byte, i, depth int) (int, bool) {
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
			s.setTop(depth, c == '{')
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
			obj := s.top(depth)
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

func (s *Scanner) setTop(depth int, obj bool) {
	w, b := depth/64, uint(depth%64)
	if obj {
		s.stack[w] |= 1 << b
	} else {
		s.stack[w] &^= 1 << b
	}
}

func (s *Scanner) top(depth int) bool {
	return s.stack[depth/64]&(1<<uint(depth%64)) != 0
}
