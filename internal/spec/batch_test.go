package spec

import (
	"strings"
	"testing"
)

// Records decoded one after another into a batch, as the pipeline's reader does, keep their own
// strings: an escaped sku must not read another record's unescaped bytes when the batch is folded.
// The five records are issue 23's reproduction; before the fix the café order was counted under
// sku-A (the last escaped sku) and the café row was gone.
func TestBatchKeepsEachRecordsStrings(t *testing.T) {
	in := []string{
		`{"order_id":"o-1","sku":"caf\u00e9","amount":"1.00","ts":1764000000000}`,
		`{"order_id":"o-2","sku":"sku-A","amount":"2.00","ts":1764000001000}`,
		`{"order_id":"o-3","sku":"sku-B","amount":"4.00","ts":1764000002000}`,
		`{"order_id":"o-4","sku":"sku-C","amount":"3.00","ts":1764000003000}`,
		`{"order_id":"o-5","sku":"\u0073ku-A","amount":"6.00","ts":1764000004000}`,
		// A shorter escaped string after a longer one: a shared buffer would mix their bytes.
		`{"order_id":"o-6","sku":"\ud83d\ude00","amount":"1.50","ts":1764000005000}`,
		`{"order_id":"o-7","sku":"s3\u00e9","amount":"0.25","ts":1764000006000}`,
	}
	p := defaultPlan(t, "order_stats_minute")
	d := p.NewDecoder()
	recs := make([]Record, len(in))
	for i, s := range in {
		if r, f := d.Decode([]byte(s), &recs[i]); r != OK {
			t.Fatalf("%s: %v %s", s, r, f)
		}
	}
	tables := p.NewTables()
	for i := range recs {
		p.Fold(&recs[i], []*Tables{tables})
	}
	var got []string
	for _, r := range tables.Rows(0) {
		cols, err := p.Format(0, r)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join(cols[1:], " "))
	}
	want := []string{"caf\u00e9 1 1.0000", "s3\u00e9 1 0.2500", "sku-A 2 8.0000", "sku-B 1 4.0000", "sku-C 1 3.0000", "\U0001F600 1 1.5000"} // byte order
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("rows\n got %q\nwant %q", got, want)
	}
}
