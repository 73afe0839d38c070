// Package database opens relay's MySQL pools with the session settings the protocol relies on.
//
// Invariant: every connection relay opens runs in UTC, in strict SQL mode (an overflowing sum is an
// error, never a silent clamp), with a wait_timeout that outlasts the gap between checkpoints and a
// lock wait shorter than the checkpoint timeout.
package database

import (
	"context"
	"database/sql"
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
}

// Open returns a pool for dsn with relay's session settings applied to every connection.
func Open(dsn string, s Session) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
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
	if s.Track != nil {
		conn = trackingConnector{Connector: conn, t: s.Track}
	}
	db := sql.OpenDB(conn)
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
