// Transaction tags (a contract with operators and XA RECOVER): <job>-<checkpoint>-<subtask>.
//
// Invariant: a tag names exactly one subtask's transaction of one checkpoint of one job, and fits
// in an XA gtrid (MaxTagBytes); checkpoint ids only grow (recovery.go), so a tag is never reused.

package commit

import (
	"strconv"
	"strings"
)

// MaxTagBytes is the XA gtrid limit: the tag must fit in it.
const MaxTagBytes = 64

// MaxTag is the longest transaction tag this job can produce.
func MaxTag(job string, subtasks int) string {
	return Tag(job, 1<<63-1, subtasks-1)
}

// Tag is the transaction tag (contract): <job>-<checkpoint>-<subtask>.
func Tag(job string, checkpoint int64, subtask int) string {
	return job + "-" + strconv.FormatInt(checkpoint, 10) + "-" + strconv.Itoa(subtask)
}

// ParseTag splits a tag of job into checkpoint and subtask; ok is false for another job's tags.
func ParseTag(job, tag string) (checkpoint int64, subtask int, ok bool) {
	rest, found := strings.CutPrefix(tag, job+"-")
	if !found {
		return 0, 0, false
	}
	cs, ss, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	c, err1 := strconv.ParseInt(cs, 10, 64)
	s, err2 := strconv.Atoi(ss)
	if err1 != nil || err2 != nil || c < 0 || s < 0 || strconv.FormatInt(c, 10) != cs || strconv.Itoa(s) != ss {
		return 0, 0, false
	}
	return c, s, true
}
