// Exit statuses. Invariant: this table is the only place a status is given a meaning; the
// process's status (exitCode), relay help and every command's --help are rendered from it, and each
// command's help lists exactly the statuses in exitsOf for it (help_test.go checks both).

package main

import (
	"fmt"
	"strings"
)

const (
	exitOK           = 0
	exitError        = 1
	exitUsage        = 2
	exitFenced       = 3
	exitDifferences  = 4
	exitNotConfirmed = 5
	exitDataRefused  = 6
)

var exitMeanings = [...]string{
	exitOK:           "ok",
	exitError:        "error, or a refusal (the message on stderr says why)",
	exitUsage:        "usage error (an unknown flag, a missing argument, an invalid configuration)",
	exitFenced:       "fenced: another process holds the job's fence (the job runs elsewhere; stop it first)",
	exitDifferences:  "differences found (verify: MySQL does not match the topic; spec diff: relay run would refuse the spec)",
	exitNotConfirmed: "nothing changed: the plan was shown without --yes (or not confirmed at the terminal)",
	exitDataRefused:  "MySQL refused a checkpoint's data: a relay bug; restarting fails the same way (docs/RUNBOOK.md, \"MySQL refused a row\")",
}

// exitsOf lists the statuses each command (by its help name) can end with.
var exitsOf = map[string][]int{
	"run":               {exitOK, exitError, exitUsage, exitFenced, exitDataRefused},
	"loadgen":           {exitOK, exitError, exitUsage},
	"config check":      {exitOK, exitError, exitUsage},
	"preflight":         {exitOK, exitError, exitUsage},
	"status":            {exitOK, exitError, exitUsage},
	"txns list":         {exitOK, exitError, exitUsage},
	"txns resolve":      {exitOK, exitError, exitUsage, exitFenced, exitNotConfirmed},
	"offsets reset":     {exitOK, exitError, exitUsage, exitFenced, exitNotConfirmed},
	"membership switch": {exitOK, exitError, exitUsage, exitFenced, exitNotConfirmed},
	"membership forget": {exitOK, exitError, exitUsage, exitNotConfirmed},
	"spec diff":         {exitOK, exitError, exitUsage, exitDifferences},
	"spec accept":       {exitOK, exitError, exitUsage, exitFenced, exitNotConfirmed},
	"verify":            {exitOK, exitError, exitUsage, exitDifferences},
	"version":           {exitOK},
}

// exitHelp is the "exit codes:" section of a command's help.
func exitHelp(name string) string {
	var b strings.Builder
	b.WriteString("exit codes:\n")
	for _, c := range exitsOf[name] {
		fmt.Fprintf(&b, "  %d  %s\n", c, exitMeanings[c])
	}
	return b.String()
}

// exitSummary is every status on one line, for relay help.
func exitSummary() string {
	parts := make([]string, len(exitMeanings))
	for c, m := range exitMeanings {
		short, _, _ := strings.Cut(m, " (")
		short, _, _ = strings.Cut(short, ":")
		parts[c] = fmt.Sprintf("%d %s", c, short)
	}
	return "Exit codes: " + strings.Join(parts, "; ") + ".\n"
}
