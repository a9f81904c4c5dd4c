package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLS is how a Client reaches a server that serves TLS: the files of
// attnplug dispatch's --tls-ca, --tls-cert and --tls-key, the name of
// --tls-server-name, and --tls itself (On). The zero TLS is plaintext.
type TLS struct {
	// On asks for TLS with the system's CAs; the other fields imply it.
	On bool
	// CAFile holds the PEM certificates of the CAs that signed the
	// server's certificate; empty: the system's.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its key,
	// for a server that requires one; they go together.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must carry; empty:
	// the host of the address dialled.
	ServerName string
}

// Enabled reports whether t asks for TLS.
func (t TLS) Enabled() bool {
	return t.On || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// Credentials returns the transport credentials for Dial: plaintext when
// t is not Enabled, else TLS 1.2 or later as t says. Its errors are the
// caller's mistakes, and name attnplug dispatch's flags.
func (t TLS) Credentials() (credentials.TransportCredentials, error) {
	if !t.Enabled() {
		return insecure.NewCredentials(), nil
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("dispatch: --tls-cert and --tls-key go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := ReadCertPool("--tls-ca", t.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("dispatch: --tls-cert %s, --tls-key %s: %v", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

// ReadCertPool reads the PEM certificates of the file at path, which the
// flag or setting called name gave (its errors name it).
func ReadCertPool(name, path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", name, path)
	}
	return pool, nil
}

// CheckAddress refuses an address that names no socket path or no valid
// host:port; unix says whether a unix socket may be given. name is the
// flag or setting that gave it, which the error names.
func CheckAddress(name, addr string, unix bool) error {
	network, address := SplitAddress(addr)
	if network == "unix" {
		if !unix {
			return fmt.Errorf("%s %q: want host:port (a TCP address)", name, addr)
		}
		if address == "" {
			return fmt.Errorf("%s %q: names no socket path", name, addr)
		}
		return nil
	}
	want := "want host:port, unix:///path or a socket path starting with / or ."
	if !unix {
		want = "want host:port"
	}
	_, port, err := net.SplitHostPort(address)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("%s %q: %v (%s)", name, addr, err, want)
	}
	return nil
}
