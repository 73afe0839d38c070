package spec

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/relay-sh/relay/internal/money"
	"github.com/relay-sh/relay/internal/order"
)

// docs/METRICS.md lists every value of relay_bad_records_total's reason label (the dead-letter
// table's reason column holds the same), no more, no fewer; and every reason a plan can return is
// one of AllReasons.
func TestMetricsDocListsEveryReason(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "METRICS.md"))
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `relay_bad_records_total` |") {
			row = line
		}
	}
	cells := strings.Split(row, " | ")
	if len(cells) < 3 {
		t.Fatalf("docs/METRICS.md has no row for relay_bad_records_total")
	}
	var doc []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(cells[2], -1) {
		if m[1] != "reason" {
			doc = append(doc, m[1])
		}
	}
	var code []string
	for _, r := range AllReasons() {
		code = append(code, r.String())
	}
	slices.Sort(doc)
	slices.Sort(code)
	if !slices.Equal(doc, code) {
		t.Errorf("docs/METRICS.md lists the reasons\n  %s\nthe code has\n  %s", strings.Join(doc, " "), strings.Join(code, " "))
	}
	p := threeFieldPlan(t)
	for _, r := range p.Reasons() {
		if !slices.Contains(AllReasons(), r) {
			t.Errorf("the plan's reason %s is not in AllReasons", r)
		}
	}
}

// docs/PIPELINES.md names the decimal limit (amount_range) as the constant it is: the default
// limits' largest amount, in units of 10^-money.Scale.
func TestPipelinesDocNamesTheAmountLimit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "PIPELINES.md"))
	if err != nil {
		t.Fatal(err)
	}
	units, scale := order.DefaultLimits().MaxAmountUnits, int64(math.Pow10(money.Scale))
	limit := fmt.Sprintf("%d.%0*d", units/scale, money.Scale, units%scale)
	if !strings.Contains(string(b), "above "+limit+" (`amount_range`; a constant") {
		t.Errorf("docs/PIPELINES.md does not name the amount limit %s as a constant", limit)
	}
}
