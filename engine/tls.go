package engine

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/attnplug/attnplug/engine/client"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ServerTLS is how attnplug serve secures a TCP address: the files of its
// --tls-cert, --tls-key and --tls-client-ca flags, and --insecure. The
// zero ServerTLS serves plaintext, on loopback only.
type ServerTLS struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// its key; they go together.
	CertFile, KeyFile string
	// ClientCAFile holds the PEM certificates of the CAs whose client
	// certificates are accepted: every client must present one (mutual
	// TLS). It needs CertFile.
	ClientCAFile string
	// Insecure serves plaintext without authentication on an address that
	// is not loopback, with a warning; it contradicts CertFile.
	Insecure bool
}

// ServerOption checks t against the address the server listens on (as
// client.SplitAddress reads it) and returns the transport credentials to
// serve with (nil: plaintext). A TCP address that is not loopback needs
// TLS or Insecure: Admin.Reload is served there too. Its errors are the
// caller's mistakes, and name attnplug serve's flags.
func (t ServerTLS) ServerOption(ctx context.Context, listen string, log hclog.Logger) (grpc.ServerOption, error) {
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		return nil, fmt.Errorf("serve: --tls-cert and --tls-key go together")
	case t.ClientCAFile != "" && t.CertFile == "":
		return nil, fmt.Errorf("serve: --tls-client-ca needs --tls-cert and --tls-key")
	case t.Insecure && t.CertFile != "":
		return nil, fmt.Errorf("serve: --insecure and --tls-cert contradict each other: pass one")
	}
	network, address := client.SplitAddress(listen)
	loopback := true
	if network == "tcp" {
		var err error
		if loopback, err = IsLoopback(ctx, address); err != nil {
			return nil, fmt.Errorf("serve: --listen %s: %v", address, err)
		}
	}
	if t.CertFile == "" {
		switch {
		case loopback:
			return nil, nil
		case t.Insecure:
			log.Warn("serving plaintext gRPC without authentication on an address that is not loopback (--insecure): whoever reaches it can dispatch and reload plugins", "address", address)
			return nil, nil
		}
		return nil, fmt.Errorf("serve: --listen %s is not a loopback address, and without TLS anyone who reaches it could call Admin.Reload unauthenticated: "+
			"give --tls-cert and --tls-key (and --tls-client-ca to require client certificates), or pass --insecure to serve plaintext anyway", address)
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("serve: --tls-cert %s, --tls-key %s: %v", t.CertFile, t.KeyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCAFile != "" {
		pool, err := client.ReadCertPool("--tls-client-ca", t.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	} else if !loopback {
		log.Info("serving TLS without client certificates: any client that reaches the address may call Admin.Reload; --tls-client-ca requires certificates", "address", address)
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// CheckMetricsExposure refuses metrics on a TCP address that is not
// loopback unless insecure (attnplug serve's --metrics-insecure) is set,
// and then logs a warning: /metrics is plain HTTP without authentication,
// and it tells whoever reaches it which backends and plugins run and how
// busy they are. It mirrors ServerTLS.Insecure. Its errors are the
// caller's mistakes, and name attnplug serve's flags.
func CheckMetricsExposure(ctx context.Context, addr string, insecure bool, log hclog.Logger) error {
	loopback, err := IsLoopback(ctx, addr)
	switch {
	case err != nil:
		return fmt.Errorf("serve: --metrics-listen %s: %v", addr, err)
	case loopback:
		return nil
	case insecure:
		log.Warn("serving metrics over plain HTTP without authentication on an address that is not loopback (--metrics-insecure): whoever reaches it can read them", "address", addr)
		return nil
	}
	return fmt.Errorf("serve: --metrics-listen %s is not a loopback address, and the metrics are plain HTTP without authentication: "+
		"serve them on loopback (the default, 127.0.0.1:9464) for a local scraper or proxy, or pass --metrics-insecure to serve them there anyway", addr)
}

// IsLoopback reports whether every address that host:port names is a
// loopback one; an empty host or an unspecified address (0.0.0.0, ::)
// listens on every interface.
func IsLoopback(ctx context.Context, address string) (bool, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false, err
	}
	if host == "" {
		return false, nil
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback(), nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return false, err
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return false, nil
		}
	}
	return len(addrs) > 0, nil
}
