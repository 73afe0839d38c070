// The worked examples of docs/PIPELINES.md as data. Invariant: an Example is exactly what its
// section shows (the YAML block, the JSON lines in order, every table as written), so that the
// oracle (this package's test) and relay (test/crash) are both held to the document itself.

package oracle

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Example is one "### Example" section: a spec, records, and what relay must write.
type Example struct {
	Title   string
	Spec    string
	Records []string
	// Tables are every aggregate table, then relay_dlq (columns record, reason, field; record is
	// the line number in the JSON block).
	Tables []DocTable
}

// DocTable is a table as the document shows it: a backquoted name on a line of its own, then a
// Markdown table whose header names the columns.
type DocTable struct {
	Name string
	Cols []string
	Rows [][]string
}

var tableName = regexp.MustCompile("^`([A-Za-z_][A-Za-z0-9_]*)`$")

// ReadExamples parses the "### Example" sections of the document at path (docs/PIPELINES.md).
func ReadExamples(path string) ([]Example, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Example
	for _, sec := range strings.Split(string(b), "\n### Example ")[1:] {
		sec, _, _ = strings.Cut(sec, "\n## ")
		ex := Example{Title: strings.SplitN(sec, "\n", 2)[0]}
		var fence string // the open fenced block's language; "" outside one
		var block []string
		var cur *DocTable
		sc := bufio.NewScanner(strings.NewReader(sec))
		for sc.Scan() {
			line := sc.Text()
			switch {
			case fence == "" && strings.HasPrefix(line, "```"):
				fence, block = strings.TrimPrefix(line, "```"), nil
			case fence != "" && line == "```":
				switch fence {
				case "yaml":
					ex.Spec = strings.Join(block, "\n") + "\n"
				case "json":
					ex.Records = block
				}
				fence = ""
			case fence != "":
				block = append(block, line)
			case tableName.MatchString(line):
				ex.Tables = append(ex.Tables, DocTable{Name: tableName.FindStringSubmatch(line)[1]})
				cur = &ex.Tables[len(ex.Tables)-1]
			case cur != nil && strings.HasPrefix(line, "|"):
				cells := strings.Split(strings.Trim(line, "|"), "|")
				for i := range cells {
					cells[i] = strings.TrimSpace(cells[i])
				}
				switch {
				case cur.Cols == nil:
					cur.Cols = cells
				case !strings.HasPrefix(cells[0], "---"):
					cur.Rows = append(cur.Rows, cells)
				}
			}
		}
		if ex.Spec == "" || len(ex.Records) == 0 || len(ex.Tables) < 2 || ex.Tables[len(ex.Tables)-1].Name != "relay_dlq" {
			return nil, fmt.Errorf("example %q: want a yaml block, a json block, its tables and relay_dlq", ex.Title)
		}
		out = append(out, ex)
	}
	if len(out) < 3 {
		return nil, fmt.Errorf("%s has %d worked examples, want 3", path, len(out))
	}
	return out, nil
}
