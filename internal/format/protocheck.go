// What proto.Unmarshal refuses in fields relay does not read. Invariant: a Protobuf record relay
// calls well-formed is one proto.Unmarshal decodes into its writer's message without error: every
// known field of every message in it is checked as protobuf checks it (a string its syntax
// validates is UTF-8, a message or group is well-formed all the way down, a packed repeated
// number is a whole run of numbers, a proto2 required field is there), while relay reads only the
// spec's fields. A message type with nothing to check costs nothing beyond the framing every walk
// checks anyway.

package format

import (
	"encoding/binary"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// pbCheck is what one message type's known fields must hold; nil: nothing beyond the framing.
type pbCheck struct {
	// fields by number: low numbers (nearly all) in a slice, one lookup by index per record
	// field; the rest in a map.
	low      []pbFieldCheck
	high     map[protowire.Number]*pbFieldCheck
	required []pbRequired // proto2 required fields, at most 64 checked
}

// lowNumbers is how many field numbers the slice of a check holds.
const lowNumbers = 64

// lookup is the check of field num, nil for a field with nothing to check.
func (c *pbCheck) lookup(num protowire.Number) *pbFieldCheck {
	if num < lowNumbers {
		if int(num) < len(c.low) && c.low[num].set {
			return &c.low[num]
		}
		return nil
	}
	return c.high[num]
}

// add records the check of field num.
func (c *pbCheck) add(num protowire.Number, fc pbFieldCheck) {
	if num < lowNumbers {
		for len(c.low) <= int(num) {
			c.low = append(c.low, pbFieldCheck{})
		}
		c.low[num] = fc
		return
	}
	if c.high == nil {
		c.high = map[protowire.Number]*pbFieldCheck{}
	}
	c.high[num] = &fc
}

// pbRequired is a required field: present when it comes in its own wire type.
type pbRequired struct {
	num  protowire.Number
	wire protowire.Type
}

// pbFieldCheck is one known field: read only in its declared wire type (anything else is an
// unknown field to protobuf); str a string protobuf validates; msg the check of a message, group
// or map entry value; packed the element wire type of a repeated number, which may come packed.
type pbFieldCheck struct {
	set    bool // the field has something to check
	wire   protowire.Type
	str    bool
	msg    *pbCheck
	nested bool // msg applies (a message field whose type has nothing to check has msg nil)
	// packable: a repeated number, whose elements of wire type packed may come as one run.
	packable bool
	packed   protowire.Type
}

// pbChecks builds each message type's check once (by full name: recursive types share theirs).
type pbChecks map[protoreflect.FullName]*pbCheck

// of is md's check, nil when md's fields, and theirs, need nothing checked.
func (cs pbChecks) of(md protoreflect.MessageDescriptor) *pbCheck {
	if c, ok := cs[md.FullName()]; ok {
		return c
	}
	c := &pbCheck{}
	cs[md.FullName()] = c // a recursive type meets itself here and checks on
	needed := false
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		fc := pbFieldCheck{wire: wireType(fd.Kind())}
		switch {
		case fd.IsMap():
			fc.wire, fc.nested, fc.msg = protowire.BytesType, true, cs.of(fd.Message())
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			fc.nested, fc.msg = true, cs.of(fd.Message())
		case enforceUTF8(fd):
			fc.str = true
		case fd.IsList() && fc.wire != protowire.BytesType:
			fc.packable, fc.packed = true, fc.wire
		}
		if fd.Cardinality() == protoreflect.Required && len(c.required) < 64 {
			c.required = append(c.required, pbRequired{fd.Number(), fc.wire})
		}
		// A message whose own check is nil is still walked for its framing, which
		// ConsumeFieldValue has checked already: nothing to add.
		if fc.str || fc.packable || (fc.nested && fc.msg != nil) {
			fc.set = true
			c.add(fd.Number(), fc)
			needed = true
		}
	}
	if !needed && len(c.required) == 0 && !cs.recursive(md) {
		cs[md.FullName()] = nil
		return nil
	}
	return c
}

// recursive says whether md's fields lead back to md (its check was handed out while being built,
// so it must stay non-nil even if it turns out empty).
func (cs pbChecks) recursive(md protoreflect.MessageDescriptor) bool {
	fields := md.Fields()
	for i := range fields.Len() {
		if m := fields.Get(i).Message(); m != nil && m.FullName() == md.FullName() {
			return true
		}
	}
	return false
}

// valid says whether message b holds what c asks of it.
func (c *pbCheck) valid(b []byte) bool {
	if c == nil {
		return true
	}
	var seen uint64 // required fields present, by their index in c.required
	for len(b) > 0 {
		num, typ, _, val, rest, ok := nextField(b)
		if !ok || !c.field(num, typ, val) {
			return false
		}
		seen |= c.present(num, typ)
		b = rest
	}
	return c.complete(seen)
}

// nextField splits message b's first field off: its number, wire type and value, and the rest;
// ok is false for bytes protobuf refuses, a field number past protowire.MaxValidNumber included
// (the wire's varint holds larger ones). A varint or fixed value is v; a length-delimited one is
// val, its bytes without the length; a group is val, its fields without the end tag, checked to
// be well-formed all the way down. The one-byte tags and lengths nearly every record is made of
// are read inline; anything longer goes through protowire, which decides what is well-formed.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, v uint64, val, rest []byte, ok bool) {
	var tag uint64
	n := 1
	if b[0] < 0x80 {
		tag = uint64(b[0])
	} else if tag, n = protowire.ConsumeVarint(b); n < 0 {
		return 0, 0, 0, nil, nil, false
	}
	num, typ = protowire.DecodeTag(tag)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, 0, nil, nil, false
	}
	b = b[n:]
	switch typ {
	case protowire.VarintType:
		if len(b) > 0 && b[0] < 0x80 {
			return num, typ, uint64(b[0]), nil, b[1:], true
		}
		if v, n = protowire.ConsumeVarint(b); n < 0 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, v, nil, b[n:], true
	case protowire.Fixed32Type:
		if len(b) < 4 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, uint64(binary.LittleEndian.Uint32(b)), nil, b[4:], true
	case protowire.Fixed64Type:
		if len(b) < 8 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, binary.LittleEndian.Uint64(b), nil, b[8:], true
	case protowire.BytesType:
		var l uint64
		if len(b) > 0 && b[0] < 0x80 {
			l, n = uint64(b[0]), 1
		} else if l, n = protowire.ConsumeVarint(b); n < 0 {
			return 0, 0, 0, nil, nil, false
		}
		if l > uint64(len(b)-n) {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, 0, b[n : n+int(l)], b[n+int(l):], true
	case protowire.StartGroupType:
		if val, n = protowire.ConsumeGroup(num, b); n < 0 {
			return 0, 0, 0, nil, nil, false
		}
		return num, typ, 0, val, b[n:], true
	}
	return 0, 0, 0, nil, nil, false // an end group without its start, or a reserved wire type
}

// field says whether field num's value (of wire type typ, framing checked; val as nextField gives
// it) holds what c asks.
func (c *pbCheck) field(num protowire.Number, typ protowire.Type, val []byte) bool {
	if c == nil {
		return true
	}
	fc := c.lookup(num)
	switch {
	case fc == nil:
		return true
	case fc.packable:
		if typ != protowire.BytesType {
			return true // one element, unpacked (framing checked), or an unknown field
		}
		for run := val; len(run) > 0; {
			var n int
			switch fc.packed {
			case protowire.VarintType:
				_, n = protowire.ConsumeVarint(run)
			case protowire.Fixed32Type:
				_, n = protowire.ConsumeFixed32(run)
			default:
				_, n = protowire.ConsumeFixed64(run)
			}
			if n < 0 {
				return false
			}
			run = run[n:]
		}
		return true
	case fc.wire != typ:
		return true // an unknown field to protobuf
	case fc.str:
		return utf8.Valid(val)
	default: // a message, or a group's fields
		return fc.msg.valid(val)
	}
}

// present is the bit of field num in c.required's order, 0 when it is not a required field read
// in its own wire type.
func (c *pbCheck) present(num protowire.Number, typ protowire.Type) uint64 {
	if c == nil {
		return 0
	}
	var bits uint64
	for i, r := range c.required {
		if r.num == num && r.wire == typ {
			bits |= 1 << i
		}
	}
	return bits
}

// complete says whether every required field was seen.
func (c *pbCheck) complete(seen uint64) bool {
	return c == nil || seen == 1<<len(c.required)-1
}
