package format

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestParseHeader(t *testing.T) {
	id, payload, err := parseHeader([]byte{0, 0, 0, 1, 2, 'x', 'y'})
	if err != nil || id != 258 || string(payload) != "xy" {
		t.Errorf("parseHeader = %d %q %v, want 258 \"xy\"", id, payload, err)
	}
	if id, payload, err := parseHeader([]byte{0, 0x7f, 0xff, 0xff, 0xff}); err != nil || id != 1<<31-1 || len(payload) != 0 {
		t.Errorf("the largest id with an empty payload: %d %q %v", id, payload, err)
	}
	for _, b := range [][]byte{nil, {0}, {0, 0, 0, 1}, {1, 0, 0, 0, 1, 'x'}, {'{', '"', 'a', '"', ':', '1', '}'}, {0, 0x80, 0, 0, 0, 'x'}} {
		if _, _, err := parseHeader(b); err == nil {
			t.Errorf("parseHeader(%v) accepted it", b)
		}
	}
}

func TestParseMessageIndexes(t *testing.T) {
	// Confluent's serializers write zigzag varints: a count, then the indexes; a count of 0 is [0].
	enc := func(vs ...int64) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.AppendVarint(b, v)
		}
		return append(b, 'p')
	}
	for _, c := range []struct {
		in   []byte
		want []int
	}{
		{enc(0), []int{0}},
		{enc(1, 0), []int{0}},
		{enc(2, 1, 3), []int{1, 3}},
		{enc(1, 300), []int{300}},
	} {
		got, rest, err := parseMessageIndexes(c.in, nil)
		if err != nil || !slices.Equal(got, c.want) || string(rest) != "p" {
			t.Errorf("parseMessageIndexes(%v) = %v %q %v, want %v \"p\"", c.in, got, rest, err, c.want)
		}
	}
	raw := func(vs ...int64) []byte { b := enc(vs...); return b[:len(b)-1] }
	for _, b := range [][]byte{nil, raw(-1), raw(2, 1), raw(1, -4), {0x80}, raw(maxMessageIndexes + 1)} {
		if got, _, err := parseMessageIndexes(b, nil); err == nil {
			t.Errorf("parseMessageIndexes(%v) = %v, accepted", b, got)
		}
	}
}
