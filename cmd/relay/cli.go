// Command-line dispatch and help.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/relay-sh/relay/internal/config"
	"github.com/relay-sh/relay/internal/ledger"
	"github.com/relay-sh/relay/internal/membership"
	"github.com/relay-sh/relay/internal/pipeline"
)

// helpOut is where help goes (stdout: it was asked for).
var helpOut io.Writer = os.Stdout

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type codedError struct {
	code int
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }

const usage = `relay moves order events from Kafka into MySQL exactly once.

Usage:
  relay run       [--config FILE]            consume and commit checkpoints until SIGTERM
  relay loadgen   --brokers B --topic T [flags]
                                             produce synthetic orders with known totals (refuses a
                                             topic a job's ledger reads; with no MySQL to ask, a
                                             topic Kafka shows in use, unless --force)
  relay config check [--config FILE]         validate the configuration offline (every error at once)
                                             and print it as relay runs it, secrets masked
  relay preflight [--config FILE]            check the configuration, then MySQL and Kafka, before a run
  relay status    [--json] [--readyz URL]    fence, last checkpoint, lag, prepared branches of the job
  relay txns list [--json]                   prepared XA branches with the ledger's verdict
  relay txns resolve <tag> --commit|--rollback [--force] [--yes]
                                             settle one branch by hand; refuses to contradict the
                                             ledger unless --force
  relay offsets reset --to earliest|latest|<time>|<topic:partition=offset,...> [--yes]
                                             move a stopped job's resume offsets
  relay membership switch [--yes]            move a stopped job between instances (i/M) and a
                                             consumer group (membership: group)
  relay membership forget [--yes]            delete stopped group members' lease and owner rows
  relay spec diff [--json]                   the spec against the table meanings the ledger records
  relay spec accept [--yes]                  record tables the spec adds or removes (a changed table
                                             is refused by relay run and here)
  relay verify    [--from earliest|<checkpoint>] [--expected FILE] [--json]
                                             recount the topic and diff it against MySQL
  relay version                              print the version
  relay help                                 this text

Configuration comes from --config FILE (YAML) and RELAY_* environment variables, which override
the file; see docs/CONFIG.md, and relay.example.yaml for every key at its default. The essentials: RELAY_JOB_NAME, RELAY_KAFKA_BROKERS,
RELAY_KAFKA_TOPICS (which must exist: relay never creates a topic), RELAY_MYSQL_DSN. Without a
spec relay runs the default one (order_id, sku, amount, ts into order_stats_minute); a spec of
your own is a pipeline: block in the file or a file named by RELAY_PIPELINE_FILE
(docs/PIPELINES.md). Windows are UTC.

Run 'relay <command> --help' for a command's flags, examples and exit codes.

Commands that change state (txns resolve, offsets reset, membership switch, membership forget,
spec accept) print their plan first and act only with --yes or after "yes" typed at a terminal;
without, nothing changes.

`

type command struct {
	name string
	fn   func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"run", cmdRun},
		{"loadgen", cmdLoadgen},
		{"config", cmdConfig},
		{"preflight", cmdPreflight},
		{"status", cmdStatus},
		{"txns", cmdTxns},
		{"offsets", cmdOffsets},
		{"membership", cmdMembership},
		{"spec", cmdSpec},
		{"verify", cmdVerify},
		{"version", cmdVersion},
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(helpOut, usage+exitSummary())
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.fn(ctx, args[1:])
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			if errors.Is(err, ledger.ErrFenced) {
				return codedError{exitFenced, err}
			}
			if errors.Is(err, pipeline.ErrDataRefused) {
				return codedError{exitDataRefused, err}
			}
			if errors.Is(err, membership.ErrSessionTimeout) {
				// A configuration the brokers refuse: invalid, like one relay refuses itself.
				return codedError{exitUsage, err}
			}
			return err
		}
	}
	return usageError{fmt.Sprintf("unknown command %q", args[0])}
}

// flagSet builds a command's flags with a --config flag and a usage line.
func flagSet(name, synopsis string) (*flag.FlagSet, *source) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	src := &source{}
	fs.StringVar(&src.path, "config", "", "YAML configuration file (RELAY_* variables override it)")
	fs.Usage = func() {
		fs.SetOutput(helpOut)
		fmt.Fprintf(helpOut, "usage: relay %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(helpOut, "\n%s", exitHelp(name))
	}
	return fs, src
}

// source is where a command's configuration comes from: the file, the environment, and the flags
// that override both.
type source struct {
	path     string
	instance string
}

// instanceFlag adds --instance, for the commands whose work depends on the process's share (run:
// what it reads; preflight: what it checks; membership switch: the layout it records); the others
// act on the job as a whole and do not offer it.
func (s *source) instanceFlag(fs *flag.FlagSet) {
	fs.StringVar(&s.instance, "instance", "", "i/M: instance i of M (overrides RELAY_INSTANCE and the file; e.g. a StatefulSet ordinal)")
}

// apply puts the flags over what the file and the environment set.
func (s *source) apply(cfg *config.Config) {
	if s.instance != "" {
		cfg.Instance = s.instance
	}
}

// load reads the configuration without validating it (loadgen needs only its spec).
func (s *source) load() (config.Config, error) {
	cfg, err := config.Load(s.path, os.Environ())
	if err == nil {
		s.apply(&cfg)
	}
	return cfg, err
}

// parse parses flags, turning flag errors into usage errors.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err // the flag package already printed fs.Usage
		}
		return usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
	}
	return nil
}

// loadConfig reads and validates the configuration, every problem at once (config.Check). An
// invalid configuration is the caller's mistake, like a bad flag: exit 2, before anything is dialled.
func loadConfig(src *source) (config.Config, error) {
	cfg, err := config.Check(src.path, os.Environ(), src.apply)
	if err != nil {
		return cfg, codedError{exitUsage, fmt.Errorf("invalid configuration:\n%w", err)}
	}
	return cfg, nil
}

// subcommand is one verb of a command with several (txns list, spec accept ...).
type subcommand struct {
	name string
	fn   func(ctx context.Context, args []string) error
}

// dispatch runs the subcommand args[0] of command name, or prints its usage.
func dispatch(ctx context.Context, name, usage string, args []string, subs ...subcommand) error {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	if len(args) == 0 {
		return usageError{fmt.Sprintf("%s: %s?", name, strings.Join(names, " or "))}
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.fn(ctx, args[1:])
		}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Print(usage)
		return nil
	}
	return usageError{fmt.Sprintf("%s: unknown subcommand %q (%s)", name, args[0], strings.Join(names, ", "))}
}
