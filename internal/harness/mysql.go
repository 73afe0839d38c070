// MySQL: a fresh database per run (what relay's ledger says was committed: package committed).
//
// Invariant: a database made here is dropped once, by the run that made it.

package harness

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/relay-sh/relay/internal/database"
)

// Open opens a pool with relay's session settings.
func Open(dsn string) (*sql.DB, error) {
	return database.Open(dsn, database.Session{WaitTimeout: time.Hour, LockWaitTimeout: 10 * time.Second})
}

// Database is a database made for one test or benchmark run.
type Database struct {
	Name  string
	DSN   string // the admin user's DSN with this database
	admin *sql.DB
	once  sync.Once
	err   error
}

// CreateDatabase makes a fresh database named prefix + a random suffix with the user of adminDSN.
func CreateDatabase(adminDSN, prefix string) (*Database, error) {
	cfg, err := mysql.ParseDSN(adminDSN)
	if err != nil {
		return nil, fmt.Errorf("admin DSN: %w", err)
	}
	d := &Database{Name: prefix + Suffix()}
	if d.admin, err = Open(cfg.FormatDSN()); err != nil {
		return nil, err
	}
	if _, err := d.admin.Exec("CREATE DATABASE " + d.Name); err != nil {
		d.admin.Close()
		return nil, fmt.Errorf("create database %s: %w", d.Name, err)
	}
	cfg.DBName = d.Name
	d.DSN = cfg.FormatDSN()
	return d, nil
}

// Drop removes the database (once; later calls return the first result). A prepared XA branch that
// wrote into it holds a metadata lock DROP waits for: roll the job's branches back first.
func (d *Database) Drop() error {
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := d.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+d.Name); err != nil {
			d.err = fmt.Errorf("drop database %s: %w", d.Name, err)
		}
		d.admin.Close()
	})
	return d.err
}
