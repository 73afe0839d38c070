// Reading relay's log: zap JSON, one entry a line.
//
// Invariant: every line of the file is returned, in order and numbered from 1; a line that is no
// JSON object has nil Fields (and no message), so a search by message passes over it and a strict
// reader can name it.

package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// LogLine is one line of a relay log.
type LogLine struct {
	N      int // line number, from 1
	Text   string
	TS     time.Time
	Logger string
	Msg    string
	Fields map[string]any // the whole entry; nil when the line is no JSON object
}

// zap's ISO8601TimeEncoder layout.
const zapTime = "2006-01-02T15:04:05.000Z0700"

// ReadLog reads every line of a relay log.
func ReadLog(path string) ([]LogLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("relay log: %w", err)
	}
	defer f.Close()
	var out []LogLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		l := LogLine{N: n, Text: sc.Text()}
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m != nil {
			l.Fields = m
			l.Msg, _ = m["msg"].(string)
			l.Logger, _ = m["logger"].(string)
			if ts, ok := m["ts"].(string); ok {
				l.TS, _ = time.Parse(zapTime, ts)
			}
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("relay log %s: %w", path, err)
	}
	return out, nil
}

// Events are the entries of a relay log with message msg.
func Events(path, msg string) ([]LogLine, error) {
	lines, err := ReadLog(path)
	var out []LogLine
	for _, l := range lines {
		if l.Msg == msg {
			out = append(out, l)
		}
	}
	return out, err
}

// Find returns the first line for which match is true.
func Find(lines []LogLine, match func(LogLine) bool) (LogLine, bool) {
	for _, l := range lines {
		if match(l) {
			return l, true
		}
	}
	return LogLine{}, false
}

// Num reads a numeric field of the entry (0 when absent).
func (l LogLine) Num(k string) float64 {
	f, _ := l.Fields[k].(float64)
	return f
}

// Tail is the last n lines of a file, for a failure's message ("" when it cannot be read).
func Tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
