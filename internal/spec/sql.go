// SQL of the aggregate tables. Invariant: as in internal/sink (which renders their CREATE TABLE
// from SinkTable, and says why), statements carry no placeholders and every value is a literal
// relay formats itself (numbers from exact integers, strings as hex literals); for the default
// spec the text is byte for byte what relay ran before the spec (default_test.go), so switching
// the pipeline to it changed no statement.

package spec

import (
	"strconv"
	"strings"
	"time"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/sink"
)

// Tables returns the aggregate table names in spec order (the a of SinkTable and AppendUpsert).
func (p *Plan) Tables() []string {
	out := make([]string, len(p.aggs))
	for i := range p.aggs {
		out[i] = p.aggs[i].table
	}
	return out
}

// SinkTable is aggregate a's table definition: sink renders its CREATE TABLE and holds an existing
// table to it (engine, columns, collation, primary key), so what is created and what is accepted
// come from one description. The default spec's is byte for byte the table relay always created.
func (p *Plan) SinkTable(a int) sink.Table {
	ag := &p.aggs[a]
	t := sink.Table{Name: ag.table, Columns: []sink.Column{{Name: WindowColumn, Type: "DATETIME"}}, Primary: []string{WindowColumn}}
	for _, d := range ag.dims {
		c := sink.Column{Name: d.column, Type: "BIGINT"}
		if fd := &p.fields[d.field]; fd.typ == typeString {
			c = sink.Column{Name: d.column, Type: "VARCHAR(" + strconv.Itoa(fd.max) + ")", Binary: true}
		}
		t.Columns = append(t.Columns, c)
		t.Primary = append(t.Primary, d.column)
	}
	for _, m := range ag.measures {
		t.Columns = append(t.Columns, sink.Column{Name: m.column, Type: p.measureType(m)})
	}
	return t
}

// Schema is the sink tables of a job: this plan's aggregate tables, then the dead-letter table and
// the append sink (empty: none).
func (p *Plan) Schema(dlq, detail string) sink.Schema {
	s := sink.Schema{DLQ: dlq, Detail: detail}
	for a := range p.aggs {
		s.Aggregates = append(s.Aggregates, p.SinkTable(a))
	}
	return s
}

// measureType is the column type: sums are DECIMAL(38, scale) (exact past int64), min and max of
// an int BIGINT, of a decimal DECIMAL(38, scale). No value relay adds can pass its column: a sum
// reaches 10^38 units only after 10^19 records of int64's largest value (10^20 at the largest
// amount, limits.MaxUnits), in one checkpoint or in the table over time, and a count BIGINT's
// bound after 2^63 records; min and max are values that passed decoding. A stored value set near
// its bound from outside makes MySQL refuse the upsert, which stops the job (pipeline.ErrDataRefused).
func (p *Plan) measureType(m measure) string {
	switch {
	case m.kind == kindCount:
		return "BIGINT"
	case m.kind != kindSum && p.fields[m.field].typ == typeInt:
		return "BIGINT"
	}
	return "DECIMAL(38," + strconv.Itoa(m.scale) + ")"
}

// AppendUpsert renders one multi-row upsert of rows (sorted, as Rows returns them) into aggregate
// a: counts and sums add, min and max keep the lesser and greater. A new row takes its values as
// they are, so min and max start from the first epoch's value. VALUES() parses on MySQL 8 and
// MariaDB alike; the "AS new" alias form does not parse on MariaDB.
func (p *Plan) AppendUpsert(dst []byte, a int, rows []Row) []byte {
	ag := &p.aggs[a]
	dst = append(dst, "INSERT INTO `"...)
	dst = append(dst, ag.table...)
	dst = append(dst, "` ("+WindowColumn...)
	for _, d := range ag.dims {
		dst = append(dst, ", "...)
		dst = append(dst, d.column...)
	}
	for _, m := range ag.measures {
		dst = append(dst, ", "...)
		dst = append(dst, m.column...)
	}
	dst = append(dst, ") VALUES "...)
	var dims []Value
	for i, r := range rows {
		window, ds, err := ag.codec.Decode([]byte(r.Key), dims)
		if err != nil {
			panic("spec: a row key the codec did not make: " + err.Error())
		}
		dims = ds
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, "('"...)
		dst = time.UnixMilli(window).UTC().AppendFormat(dst, "2006-01-02 15:04:05")
		dst = append(dst, '\'')
		for j, v := range dims {
			dst = append(dst, ',')
			if ag.codec.ints[j] {
				dst = strconv.AppendInt(dst, v.Int, 10)
			} else {
				dst = sink.AppendHexString(dst, string(v.Bytes))
			}
		}
		for j, m := range ag.measures {
			dst = append(dst, ',')
			dst = p.appendMeasure(dst, m, r.Accs[j])
		}
		dst = append(dst, ')')
	}
	dst = append(dst, " ON DUPLICATE KEY UPDATE "...)
	for j, m := range ag.measures {
		if j > 0 {
			dst = append(dst, ", "...)
		}
		c := m.column
		switch m.kind {
		case kindMin:
			dst = append(dst, c+" = LEAST("+c+", VALUES("+c+"))"...)
		case kindMax:
			dst = append(dst, c+" = GREATEST("+c+", VALUES("+c+"))"...)
		default:
			dst = append(dst, c+" = "+c+" + VALUES("+c+")"...)
		}
	}
	return dst
}

// appendMeasure renders one accumulator as its column's literal, which is also how MySQL prints the
// column (CAST AS CHAR): an integer, or a decimal with exactly the column's fractional digits.
func (p *Plan) appendMeasure(dst []byte, m measure, acc Acc) []byte {
	switch {
	case m.kind == kindSum:
		return appendScaled(dst, acc.Sum, m.scale)
	case m.kind == kindCount || p.fields[m.field].typ == typeInt:
		return strconv.AppendInt(dst, acc.N, 10)
	default:
		return appendScaled(dst, money.SumOf(acc.N), m.scale)
	}
}

// appendScaled renders s, a count of 10^-scale units, with exactly scale fractional digits.
func appendScaled(dst []byte, s money.Sum, scale int) []byte {
	// String renders s / 10^money.Scale; without its point, its digits are s itself.
	str := s.String()
	if str[0] == '-' {
		dst, str = append(dst, '-'), str[1:]
	}
	digits := strings.TrimLeft(strings.Replace(str, ".", "", 1), "0")
	if pad := scale + 1 - len(digits); pad > 0 {
		digits = strings.Repeat("0", pad) + digits
	}
	dst = append(dst, digits[:len(digits)-scale]...)
	if scale > 0 {
		dst = append(dst, '.')
		dst = append(dst, digits[len(digits)-scale:]...)
	}
	return dst
}
