// Operator commands' shared wiring: help text, configuration, databases and output.
//
// Invariant: every operator command works on the same configuration and the same database
// sessions as relay run (loadConfig, openDBs), prints its result on stdout (a table, or JSON with
// --json) and its log lines on stderr, and never leaves a pool or a fence open when it returns. A
// command that changes state prints its plan first and applies it only with --yes or a "yes"
// typed at a terminal; otherwise it changes nothing and exits 5.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/ops"
)

const configHelp = `Configuration, the same for every command: --config FILE (YAML) and RELAY_* variables, which
override it (RELAY_JOB_NAME, RELAY_KAFKA_BROKERS, RELAY_KAFKA_TOPICS, RELAY_MYSQL_DSN, ...; see
docs/CONFIG.md); the pipeline spec is the file's pipeline: block or RELAY_PIPELINE_FILE, else the
default spec (docs/PIPELINES.md).
`

// opsFlags builds a command's flags, with help that says what it does, its flags and defaults,
// examples and exit codes.
func opsFlags(name, synopsis, about, examples string) (*flag.FlagSet, *source) {
	fs, path := flagSet(name, synopsis)
	fs.Usage = func() {
		fs.SetOutput(helpOut)
		fmt.Fprintf(helpOut, "usage: relay %s %s\n\n%s\n%s\nflags:\n", name, synopsis, about, configHelp)
		fs.PrintDefaults()
		fmt.Fprintf(helpOut, "\nexamples:\n%s\n%s", examples, exitHelp(name))
	}
	return fs, path
}

// parseWithArg parses flags around one positional argument ("" when there is none).
func parseWithArg(fs *flag.FlagSet, args []string) (string, error) {
	if err := parse(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() == 0 {
		return "", nil
	}
	arg := fs.Arg(0)
	if err := parse(fs, fs.Args()[1:]); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", usageError{fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return arg, nil
}

// withEnv loads and validates the configuration, opens the databases and the ledger, and runs fn.
func withEnv(ctx context.Context, path *source, fn func(context.Context, *ops.Env) error) error {
	cfg, err := loadConfig(path)
	if err != nil {
		return err
	}
	env, closeEnv, err := openEnv(cfg)
	if err != nil {
		return err
	}
	defer closeEnv()
	if err := ledger.EnsureSchema(ctx, env.Ledger.DB()); err != nil {
		return err
	}
	return fn(ctx, env)
}

// openEnv opens what a command works on; cfg need not be valid (preflight reports why).
func openEnv(cfg config.Config) (*ops.Env, func(), error) {
	log, err := newLogger(cfg.LogLevel)
	if err != nil {
		// An invalid log_level is preflight's to report, not a reason to report nothing.
		if log, err = newLogger("info"); err != nil {
			return nil, nil, err
		}
	}
	sinkDB, ledgerDB, _, err := openDBs(cfg, false)
	if err != nil {
		return nil, nil, err
	}
	env := &ops.Env{Config: cfg, Sink: sinkDB, Ledger: ledger.New(ledgerDB, cfg.Job.Name), Log: log, Operator: operator()}
	// The mode relay run would pick (unset: held on a Galera node). A server that cannot be read
	// leaves it to the command to report; mode xa on Galera is preflight's to refuse.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if g, err := database.ReadGalera(ctx, sinkDB); err == nil {
		env.Galera = g
		env.ModePicked, _ = env.Config.ResolveMode(g.On)
	} else {
		_, _ = env.Config.ResolveMode(false)
	}
	cancel()
	return env, func() {
		if ledgerDB != sinkDB {
			ledgerDB.Close()
		}
		sinkDB.Close()
		_ = log.Sync()
	}, nil
}

// operator names who runs a command, for audit rows and fence ownership: user@host pid N.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	return name + "@" + owner()
}

// confirmer shows a plan and says whether to apply it. With yes it applies it without asking
// (with --json the plan is not printed: the report printed after acting holds it); without, an
// operator at a terminal is asked, and anywhere else (a script, a pipe) the plan is all that
// happens, so that no script changes state it never had to name.
func confirmer(yes, asJSON bool) ops.Confirm {
	return func(p ops.Plan) (bool, error) {
		if !yes || !asJSON {
			if err := textOrJSON(asJSON, p); err != nil {
				return false, err
			}
		}
		if yes || !stdinIsTerminal() {
			return yes, nil
		}
		fmt.Fprint(os.Stderr, "apply this plan? type yes to go on: ")
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		return strings.TrimSpace(line) == "yes", nil
	}
}

// stdinIsTerminal asks the tty driver: a character device alone may be /dev/null.
func stdinIsTerminal() bool { return term.IsTerminal(int(os.Stdin.Fd())) }

// notConfirmed gives a plan that was not applied its exit status and says how to apply it.
func notConfirmed(err error) error {
	if errors.Is(err, ops.ErrNotConfirmed) {
		return codedError{exitNotConfirmed, fmt.Errorf("%w; re-run with --yes to apply the plan above", err)}
	}
	return err
}

// textOrJSON prints a report as JSON, or as its text rendering.
func textOrJSON(asJSON bool, r interface{ WriteText(io.Writer) error }) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.WriteText(os.Stdout)
}
