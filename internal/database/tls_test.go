package database_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relay-sh/relay/internal/database"
	"github.com/relay-sh/relay/internal/testenv"
)

// With a CA file relay's sessions are encrypted and the server is verified against that CA and
// the DSN's host: another CA or another name is refused, never answered in plaintext.
func TestVerifiedTLS(t *testing.T) {
	dsn := testenv.AdminDSN(t)
	ca := os.Getenv("RELAY_TEST_MYSQL_CA")
	if ca == "" {
		t.Skip("RELAY_TEST_MYSQL_CA not set: no CA for the test MySQL (scripts/services.sh sets it for the MariaDB it starts)")
	}
	ctx := testenv.Context(t, time.Minute)
	cipher := func(s database.Session) (string, error) {
		db, err := database.Open(dsn, s)
		if err != nil {
			return "", err
		}
		defer db.Close()
		var name, v string
		err = db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &v)
		return v, err
	}
	if c, err := cipher(database.Session{TLS: database.TLS{CAFile: ca}}); err != nil || c == "" {
		t.Fatalf("with the server's CA: cipher %q, err %v; want an encrypted session", c, err)
	}
	if c, err := cipher(database.Session{}); err != nil || c != "" {
		t.Fatalf("without TLS settings (DSN has no tls=): cipher %q, err %v; want plaintext", c, err)
	}
	var unknown x509.UnknownAuthorityError
	if _, err := cipher(database.Session{TLS: database.TLS{CAFile: otherCA(t)}}); !errors.As(err, &unknown) {
		t.Fatalf("with another CA: %v, want x509.UnknownAuthorityError", err)
	}
	var host x509.HostnameError
	if _, err := cipher(database.Session{TLS: database.TLS{CAFile: ca, ServerName: "db.example"}}); !errors.As(err, &host) {
		t.Fatalf("with another server name: %v, want x509.HostnameError", err)
	}
}

// otherCA writes a fresh self-signed CA certificate and returns its path.
func otherCA(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the server's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
