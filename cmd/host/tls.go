package main

import (
	"flag"

	"github.com/attnplug/attnplug/engine"
	"github.com/attnplug/attnplug/engine/client"
)

// registerServeTLS adds attnplug serve's TLS flags to fs, filling t
// (engine.ServerTLS.ServerOption checks them and builds the credentials).
func registerServeTLS(fs *flag.FlagSet, t *engine.ServerTLS) {
	fs.StringVar(&t.CertFile, "tls-cert", "", "PEM certificate (chain) of the server: serve gRPC over TLS; needs --tls-key")
	fs.StringVar(&t.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&t.ClientCAFile, "tls-client-ca", "", "PEM certificates of the CAs whose client certificates are accepted: every client must present one (mutual TLS); needs --tls-cert")
	fs.BoolVar(&t.Insecure, "insecure", false, "serve plaintext gRPC without authentication on a TCP address that is not loopback (refused otherwise); a warning is logged")
}

// registerConnectTLS adds dispatch --connect's TLS flags to fs, filling t
// (client.TLS.Credentials builds the credentials).
func registerConnectTLS(fs *flag.FlagSet, t *client.TLS) {
	fs.BoolVar(&t.On, "tls", false, "with --connect: speak TLS, checking the server's certificate against the system's CAs (implied by the other --tls flags)")
	fs.StringVar(&t.CAFile, "tls-ca", "", "with --connect: PEM certificates of the CAs that signed the server's certificate")
	fs.StringVar(&t.CertFile, "tls-cert", "", "with --connect: PEM client certificate, for a server that requires one (--tls-client-ca); needs --tls-key")
	fs.StringVar(&t.KeyFile, "tls-key", "", "with --connect: PEM private key of --tls-cert")
	fs.StringVar(&t.ServerName, "tls-server-name", "", "with --connect: the name the server's certificate must carry (default: the host of --connect)")
}

// usage makes err, a mistake in the flags a library checked, a usage
// error (exit status 2); nil stays nil.
func usage(err error) error {
	if err == nil {
		return nil
	}
	return &usageError{err.Error()}
}
