// relay preflight: check the servers and the configuration before the first relay run.

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relay-sh/relay/internal/ops"
)

const preflightAbout = `Checks what relay run needs, one line per check: "ok|warn|FAIL <name>: <detail>". A FAIL says
which setting is wrong, by how much, and what to change; a warn does not fail preflight.

  config             the configuration validates, as relay config check checks it (every refusal
                     names its key and variable; with any, nothing else is checked: exit 2)
  mysql              server flavour and version: MySQL >= 5.7.7 or MariaDB >= 10.5.2 for mode xa
  galera             whether the server is a Galera node (MariaDB Galera, Percona XtraDB Cluster):
                     ok when it is not, and ok on one in mode held (mode unset picks held there);
                     FAIL only for mode xa on Galera, which has no XA
  schema             relay's tables exist or can be created (CREATE privilege, ledger version), and
                     each sink table is InnoDB and exactly what relay writes (columns, types, sku
                     collation, primary key, no other unique key); relay never alters one
  xa                 (mode xa) a probe branch (relaypreflight-...) is started, prepared and rolled
                     back, and its row is gone afterwards (nothing is left behind)
  xa_recover         (mode xa) XA RECOVER is allowed (MySQL 8: XA_RECOVER_ADMIN)
  binlog_format      ROW when the binary log is on (warn for MIXED; FAIL for STATEMENT, which cannot
                     log the sink's READ COMMITTED writes)
  session_timeout    the wait_timeout relay's sessions really get exceeds checkpoint.interval +
                     checkpoint.timeout + checkpoint.restart_allowance
  lock_wait_timeout  the innodb_lock_wait_timeout they get is below checkpoint.timeout
  isolation          the sink's sessions really run at READ-COMMITTED
  connections        max_connections has room for the subtasks and relay's own connections
  table_owner        no other job of the ledger owns the aggregate table (or the append sink);
                     warn when an unowned one holds rows although the job never committed
  spec               each aggregate table keeps the meaning the ledger recorded for it (window,
                     fields, measures, filter; relay spec diff shows the comparison), and no table
                     was added or removed without relay spec accept
  orphans            prepared branches of jobs missing from the ledger (warn: they hold locks)
  topics             every configured topic exists; its partitions; the job's resume offsets lie
                     within them (not beyond a recreated or truncated topic's end, not below what
                     retention deleted)
  schema_registry    (input.format avro, json_schema) the registry answers, and every topic's subject
                     (<topic>-value) has versions that give each field of the spec exactly (a field
                     no version has, or a float or double for a decimal, is refused by its key)
  tag_length         the longest transaction tag fits XA's 64 bytes
`

func cmdPreflight(ctx context.Context, args []string) error {
	fs, path := opsFlags("preflight", "[--config FILE] [--instance i/M]", preflightAbout,
		`  relay preflight --config relay.yaml
  RELAY_MYSQL_SESSION_TIMEOUT=10m relay preflight
`)
	path.instanceFlag(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	// The configuration first, as relay config check does it: an invalid one is never dialled with
	// (its DSN, TLS files or timeouts may be the mistake), and every error is one FAIL line.
	cfg, err := loadConfig(path)
	if err != nil {
		var all interface{ Unwrap() []error }
		if !errors.As(err, &all) {
			return err
		}
		for _, e := range all.Unwrap() {
			fmt.Println(ops.Check{Name: "config", Status: ops.CheckFail, Detail: e.Error()})
		}
		return codedError{exitUsage, fmt.Errorf("preflight: %d configuration errors; MySQL and Kafka were not checked", len(all.Unwrap()))}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	e, closeEnv, err := openEnv(cfg)
	if err != nil {
		fmt.Println(ops.Check{Name: "mysql", Status: ops.CheckFail, Detail: err.Error()})
		return fmt.Errorf("preflight: %w", err)
	}
	defer closeEnv()
	checks := ops.Preflight(ctx, e)
	for _, c := range checks {
		fmt.Println(c)
	}
	if n := ops.Failed(checks); n > 0 {
		return fmt.Errorf("preflight: %d of %d checks failed", n, len(checks))
	}
	return nil
}
