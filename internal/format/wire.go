// Confluent's wire format: a zero magic byte, the writer schema's id as 4 bytes big-endian, then the
// payload (for Protobuf, the message-index list first). Invariant: a value this accepts is framed
// exactly as Confluent's serializers write it; anything else is bad input (bad_header), never
// guessed at.

package format

import (
	"encoding/binary"
	"errors"

	"github.com/relay-sh/relay/internal/spec"
)

// headerLen is the magic byte and the schema id.
const headerLen = 5

var errHeader = errors.New("not in the registry's wire format")

// parseHeader splits a framed value into its writer schema id and the payload after the header.
func parseHeader(b []byte) (id int, payload []byte, err error) {
	if len(b) < headerLen || b[0] != 0 {
		return 0, nil, errHeader
	}
	// Ids are positive int32s in Confluent's registry and in Apicurio's ccompat API; the high bit
	// set would be a negative id, which no registry hands out.
	u := binary.BigEndian.Uint32(b[1:headerLen])
	if u > 1<<31-1 {
		return 0, nil, errHeader
	}
	return int(u), b[headerLen:], nil
}

// framed is the schema id and the payload after the header of a record of p in the wire format,
// or the reason its bytes alone decide: too_large (the whole value), bad_header.
func framed(p *spec.Plan, b []byte) (id int, payload []byte, r spec.Reason) {
	if p.TooLarge(b) {
		return 0, nil, spec.ReasonTooLarge
	}
	id, payload, err := parseHeader(b)
	if err != nil {
		return 0, nil, spec.ReasonBadHeader
	}
	return id, payload, spec.OK
}

// AppendHeader appends the wire format's header of a value written under schema id (a producer's
// side: relay loadgen).
func AppendHeader(dst []byte, id int) []byte {
	return binary.BigEndian.AppendUint32(append(dst, 0), uint32(id))
}

// maxMessageIndexes bounds the Protobuf message-index list: one index per nesting level of the
// message in its file, and no file nests messages this deep.
const maxMessageIndexes = 100

// parseMessageIndexes reads the Protobuf message-index list that follows the header: a zigzag
// varint count, then that many zigzag varint indexes (the path to the message type through the
// file's nested messages). A count of 0 is the common case, the first message of the file, [0].
// The indexes are appended to into; rest is the Protobuf payload.
func parseMessageIndexes(b []byte, into []int) (indexes []int, rest []byte, err error) {
	n, k := binary.Varint(b)
	if k <= 0 || n < 0 || n > maxMessageIndexes {
		return nil, nil, errHeader
	}
	b = b[k:]
	if n == 0 {
		return append(into, 0), b, nil
	}
	for range n {
		v, k := binary.Varint(b)
		if k <= 0 || v < 0 || v > 1<<31-1 {
			return nil, nil, errHeader
		}
		into = append(into, int(v))
		b = b[k:]
	}
	return into, b, nil
}
