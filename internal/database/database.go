// Package database opens relay's MySQL pools with the session settings the protocol relies on.
//
// Invariant: every connection relay opens runs in UTC, in strict SQL mode (an overflowing sum is an
// error, never a silent clamp), with a wait_timeout that outlasts the gap between checkpoints and a
// lock wait shorter than the checkpoint timeout; a pool opened with ReadCommitted runs every
// session at READ COMMITTED before its first statement; statements go through the text protocol
// (arguments interpolated by the driver), never as server-side prepared statements.
package database

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
)

// Session holds the per-connection settings.
type Session struct {
	WaitTimeout     time.Duration
	LockWaitTimeout time.Duration
	TLS             TLS // zero: whatever the DSN's tls parameter says
	// StatementTimeout bounds every read and write on the socket (the driver's readTimeout and
	// writeTimeout, unless the DSN sets them): a blackholed connection fails in bounded time even
	// where no context deadline applies.
	StatementTimeout time.Duration
	Track            *Tracker // nil: sessions are not tracked
	// ReadCommitted runs every session at READ COMMITTED. Under REPEATABLE READ an upsert of an
	// existing row also locks the gap before it, so one subtask's open branch blocks a peer
	// inserting a new key just below one of its rows until the whole checkpoint ends. InnoDB logs
	// READ COMMITTED writes only as rows: see Binlog.CheckReadCommitted.
	ReadCommitted bool
	// CausalReads runs every session on a Galera node with wsrep_sync_wait=1 (see galera.go);
	// elsewhere it costs one SHOW per new connection and sets nothing.
	CausalReads bool
}

// readCommitted is portable: MariaDB 10.11 names the variable tx_isolation, MySQL 8
// transaction_isolation.
const readCommitted = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"

// Open returns a pool for dsn with relay's session settings applied to every connection.
func Open(dsn string, s Session) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// Arguments are interpolated by the driver into one COM_QUERY, never sent as server-side
	// prepared statements (COM_STMT_PREPARE, EXECUTE, CLOSE). On a Galera node a transaction that a
	// replicated write aborts (BF abort) while its client sits between such commands can lose its
	// deadlock error: the server rolled the transaction back, the client's next statements run
	// in autocommit and its COMMIT succeeds with nothing (seen here with MariaDB 10.11.19 and
	// galera 26.4.23 in about 1 of 200–500 racing rounds; test/galera TestRacingTransactions).
	// Every statement relay sends through the text protocol gets the error. It also saves two
	// round trips per statement. The driver refuses it with a multi-byte charset that is unsafe to
	// escape (big5, cp932, gb2312, gbk, sjis): relay's DSN must not name one.
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'"
	if s.WaitTimeout > 0 {
		cfg.Params["wait_timeout"] = strconv.Itoa(int(s.WaitTimeout.Seconds()))
	}
	if s.LockWaitTimeout > 0 {
		cfg.Params["innodb_lock_wait_timeout"] = strconv.Itoa(int(s.LockWaitTimeout.Seconds()))
	}
	if s.TLS.enabled() {
		if cfg.TLS, err = s.TLS.Config(cfg.Addr); err != nil {
			return nil, err
		}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = s.StatementTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = s.StatementTimeout
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	var c driver.Connector = conn
	if s.ReadCommitted {
		c = initConnector{Connector: c, stmts: []string{readCommitted}}
	}
	if s.CausalReads {
		c = causalConnector{Connector: c}
	}
	if s.Track != nil {
		c = trackingConnector{Connector: c, t: s.Track}
	}
	db := sql.OpenDB(c)
	db.SetConnMaxIdleTime(time.Minute)
	return db, nil
}

// Redact hides the password of a DSN for logs and errors.
func Redact(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "(unparsable dsn)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.FormatDSN()
}

// ServerVar reads one global status or variable value as an int.
func ServerVar(ctx context.Context, db *sql.DB, query string) (int, error) {
	var name, val string
	if err := db.QueryRowContext(ctx, query).Scan(&name, &val); err != nil {
		return 0, err
	}
	return strconv.Atoi(val)
}

// SetLogger sends the driver's own messages (a connection that died under it, "unexpected EOF")
// through log, so relay's log stays one JSON object a line.
func SetLogger(log *zap.Logger) {
	_ = mysql.SetLogger(driverLog{log})
}

type driverLog struct{ l *zap.Logger }

func (d driverLog) Print(v ...any) { d.l.Warn(strings.TrimSpace(fmt.Sprint(v...))) }

// initConnector runs statements on every new session before the pool hands it out.
type initConnector struct {
	driver.Connector
	stmts []string
}

func (c initConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("driver connection %T cannot execute", conn)
	}
	for _, q := range c.stmts {
		if _, err := ex.ExecContext(ctx, q, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("session setup %q: %w", q, err)
		}
	}
	return conn, nil
}

// Isolation reads the isolation level a session of db runs at (READ-COMMITTED, REPEATABLE-READ..).
func Isolation(ctx context.Context, db *sql.DB) (string, error) {
	var name, level string
	// MariaDB 10.11 knows only tx_isolation, MySQL 8 only transaction_isolation.
	err := db.QueryRowContext(ctx, "SHOW SESSION VARIABLES WHERE Variable_name IN ('transaction_isolation', 'tx_isolation')").Scan(&name, &level)
	if err != nil {
		return "", fmt.Errorf("read the isolation level: %w", err)
	}
	return level, nil
}

// Binlog is the binary log as a session of db sees it.
type Binlog struct {
	On     bool
	Format string // ROW, MIXED or STATEMENT: the session's, which may differ from the global one
}

// ReadBinlog reads log_bin and the session's binlog_format.
func ReadBinlog(ctx context.Context, db *sql.DB) (Binlog, error) {
	var on int
	var b Binlog
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.log_bin, @@SESSION.binlog_format").Scan(&on, &b.Format); err != nil {
		return b, fmt.Errorf("read log_bin, binlog_format: %w", err)
	}
	b.On = on != 0
	return b, nil
}

// CheckReadCommitted refuses statement format: InnoDB cannot log a READ COMMITTED write as a
// statement (every upsert would fail with error 1665); MIXED logs such writes as rows.
func (b Binlog) CheckReadCommitted() error {
	if b.On && strings.EqualFold(b.Format, "STATEMENT") {
		return errors.New("binlog_format is STATEMENT: relay's sink sessions run at READ COMMITTED, which InnoDB logs only as rows; set binlog_format=ROW (or MIXED) on the server")
	}
	return nil
}

// Discard closes c and keeps the pool from reusing it: go-sql-driver returns a connection to its
// pool without resetting it, so one that may hold an open or prepared transaction must never go
// back (the next user would write inside that transaction).
func Discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}
