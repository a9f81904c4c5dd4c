package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// serveTLSFlags are how attnplug serve secures a TCP address.
type serveTLSFlags struct {
	cert, key, clientCA string
	insecure            bool
}

func (f *serveTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate (chain) of the server: serve gRPC over TLS; needs --tls-key")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.clientCA, "tls-client-ca", "", "PEM certificates of the CAs whose client certificates are accepted: every client must present one (mutual TLS); needs --tls-cert")
	fs.BoolVar(&f.insecure, "insecure", false, "serve plaintext gRPC without authentication on a TCP address that is not loopback (refused otherwise); a warning is logged")
}

// serverOption checks the flags against where the server listens and
// returns the transport credentials to serve with (nil: plaintext). A TCP
// address that is not loopback needs TLS or --insecure: Admin.Reload is
// served there too.
func (f *serveTLSFlags) serverOption(ctx context.Context, network, address string, log hclog.Logger) (grpc.ServerOption, error) {
	switch {
	case (f.cert == "") != (f.key == ""):
		return nil, &usageError{"serve: --tls-cert and --tls-key go together"}
	case f.clientCA != "" && f.cert == "":
		return nil, &usageError{"serve: --tls-client-ca needs --tls-cert and --tls-key"}
	case f.insecure && f.cert != "":
		return nil, &usageError{"serve: --insecure and --tls-cert contradict each other: pass one"}
	}
	loopback := true
	if network == "tcp" {
		var err error
		if loopback, err = isLoopback(ctx, address); err != nil {
			return nil, &usageError{fmt.Sprintf("serve: --listen %s: %v", address, err)}
		}
	}
	if f.cert == "" {
		switch {
		case loopback:
			return nil, nil
		case f.insecure:
			log.Warn("serving plaintext gRPC without authentication on an address that is not loopback (--insecure): whoever reaches it can dispatch and reload plugins", "address", address)
			return nil, nil
		}
		return nil, &usageError{fmt.Sprintf("serve: --listen %s is not a loopback address, and without TLS anyone who reaches it could call Admin.Reload unauthenticated: "+
			"give --tls-cert and --tls-key (and --tls-client-ca to require client certificates), or pass --insecure to serve plaintext anyway", address)}
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("serve: --tls-cert %s, --tls-key %s: %v", f.cert, f.key, err)}
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.clientCA != "" {
		pool, err := readCertPool("--tls-client-ca", f.clientCA)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	} else if !loopback {
		log.Info("serving TLS without client certificates: any client that reaches the address may call Admin.Reload; --tls-client-ca requires certificates", "address", address)
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// isLoopback reports whether every address that host:port names is a
// loopback one; an empty host or an unspecified address (0.0.0.0, ::)
// listens on every interface.
func isLoopback(ctx context.Context, address string) (bool, error) {
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

// readCertPool reads PEM certificates from path, for flag.
func readCertPool(flag, path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("%s: %v", flag, err)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, &usageError{fmt.Sprintf("%s %s: no PEM certificate in it", flag, path)}
	}
	return pool, nil
}

// connectTLSFlags are how dispatch --connect reaches a server that serves
// TLS.
type connectTLSFlags struct {
	on                    bool
	ca, cert, key, server string
}

func (f *connectTLSFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "tls", false, "with --connect: speak TLS, checking the server's certificate against the system's CAs (implied by the other --tls flags)")
	fs.StringVar(&f.ca, "tls-ca", "", "with --connect: PEM certificates of the CAs that signed the server's certificate")
	fs.StringVar(&f.cert, "tls-cert", "", "with --connect: PEM client certificate, for a server that requires one (--tls-client-ca); needs --tls-key")
	fs.StringVar(&f.key, "tls-key", "", "with --connect: PEM private key of --tls-cert")
	fs.StringVar(&f.server, "tls-server-name", "", "with --connect: the name the server's certificate must carry (default: the host of --connect)")
}

// enabled reports whether TLS was asked for.
func (f *connectTLSFlags) enabled() bool {
	return f.on || f.ca != "" || f.cert != "" || f.key != "" || f.server != ""
}

// credentials returns the transport credentials of a connection to a
// server at addr; connect says whether --connect was given.
func (f *connectTLSFlags) credentials(connect bool) (credentials.TransportCredentials, error) {
	switch {
	case !f.enabled():
		return insecure.NewCredentials(), nil
	case !connect:
		return nil, &usageError{"dispatch: the --tls flags configure --connect, which is not given"}
	case (f.cert == "") != (f.key == ""):
		return nil, &usageError{"dispatch: --tls-cert and --tls-key go together"}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.server}
	if f.ca != "" {
		pool, err := readCertPool("--tls-ca", f.ca)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		cert, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("dispatch: --tls-cert %s, --tls-key %s: %v", f.cert, f.key, err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}
