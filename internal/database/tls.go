// TLS to MySQL from PEM files: a private CA (RDS bundles, an internal PKI) and optionally a client
// certificate.
//
// Invariant: when a CA file is named, the server's certificate is verified against it and nothing
// else, host name included; relay never falls back to an unverified or plaintext connection.

package database

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// TLS names the files of a verified connection. The zero value leaves TLS to the DSN (tls=...).
type TLS struct {
	CAFile     string // PEM bundle the server certificate must chain to
	CertFile   string // client certificate (PEM), with KeyFile; optional
	KeyFile    string
	ServerName string // name to verify; default the host of the DSN's address
}

func (t TLS) enabled() bool { return t.CAFile != "" || t.CertFile != "" }

// Config builds the client TLS configuration for a server at addr (host:port).
func (t TLS) Config(addr string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		c.ServerName = host
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca file %s: no PEM certificate in it", t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("tls client certificate and key go together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
