package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/attnplug/attnplug/api/dispatchv1"
	"github.com/attnplug/attnplug/core"
	"github.com/attnplug/attnplug/internal/testbin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// certPair is a certificate and its key in PEM files.
type certPair struct {
	cert, key string
	x509      *x509.Certificate
	priv      *ecdsa.PrivateKey
}

// newCert makes a certificate for 127.0.0.1 and localhost, signed by
// parent, or self-signed when parent is nil, into dir/name.{crt,key}.
func newCert(t *testing.T, dir, name string, parent *certPair, isCA bool) *certPair {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	signer, signerKey := tmpl, priv
	if parent != nil {
		signer, signerKey = parent.x509, parent.priv
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &priv.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	c := &certPair{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key"), priv: priv}
	if c.x509, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

var tcpReady = regexp.MustCompile(`listening on (\S+), metrics`)

// serveTCP runs attnplug serve from tree with args. It returns the port it
// listens on, or, when serve exits first, 0 and its exit status; stderr
// is everything serve wrote until then.
func serveTCP(t *testing.T, tree *testbin.Bins, args ...string) (port string, code int, stderr *syncBuf) {
	t.Helper()
	args = append([]string{"serve", "--metrics-listen", "", "--match-hardware=false", "--log-level", "info"}, args...)
	cmd := exec.Command(tree.Host, args...)
	cmd.Env = append(os.Environ(), "ATTNPLUG_CACHE_DIR="+warmCacheDir(t), "ATTNPLUG_PLUGIN_DIR=")
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	stderr = &syncBuf{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			stderr.Write([]byte(sc.Text() + "\n"))
			if m := tcpReady.FindStringSubmatch(sc.Text()); m != nil {
				ready <- m[1]
			}
		}
	}()
	exited := make(chan int, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		exited <- code
	}()
	select {
	case addr := <-ready:
		t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); <-exited })
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		return port, 0, stderr
	case code := <-exited:
		<-scanned // every line the process wrote is in stderr
		return "", code, stderr
	case <-testContext(t).Done():
		cmd.Process.Kill()
		t.Fatalf("serve neither ready nor done:\n%s", stderr)
	}
	return "", 0, stderr
}

// dispatchOver sends one fa3 request over gRPC with creds and returns the
// error of the call.
func dispatchOver(t *testing.T, port string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := dispatchv1.NewDispatcherClient(conn).Dispatch(testContext(t), &dispatchv1.DispatchRequest{Request: pbRequest("fa3", core.ModeDecode)})
	if err == nil && resp.GetAnswer().GetPlugin() != "fa3" {
		t.Errorf("answer %v, want fa3's", resp.GetAnswer())
	}
	return err
}

// TestServeRefusesPlaintextBeyondLoopback: serve on a TCP address that is
// not loopback needs TLS or --insecure; TLS and mutual TLS work with real
// connections, from Go clients and from dispatch --connect.
func TestServeRefusesPlaintextBeyondLoopback(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "aiter", "ascend", "dsa", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	server := newCert(t, dir, "server", nil, true) // self-signed
	clientCA := newCert(t, dir, "client-ca", nil, true)
	client := newCert(t, dir, "client", clientCA, false)
	stranger := newCert(t, dir, "stranger", nil, false)
	roots := x509.NewCertPool()
	roots.AddCert(server.x509)
	tlsCreds := func(c *certPair) credentials.TransportCredentials {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if c != nil {
			pair, err := tls.LoadX509KeyPair(c.cert, c.key)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return credentials.NewTLS(cfg)
	}

	checkServeRefusals(t, tree, dir, server, clientCA)
	checkServePlaintext(t, tree)

	t.Run("all interfaces, TLS", func(t *testing.T) {
		port, code, stderr := serveTCP(t, tree, "--listen", "0.0.0.0:0", "--tls-cert", server.cert, "--tls-key", server.key)
		if port == "" {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		if err := dispatchOver(t, port, tlsCreds(nil)); err != nil {
			t.Errorf("TLS client: %v", err)
		}
		if err := dispatchOver(t, port, insecure.NewCredentials()); err == nil {
			t.Error("a plaintext client was answered by a TLS server")
		}
		in := `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
		res := host(t, tree, in, "dispatch", "--connect", "127.0.0.1:"+port, "--tls-ca", server.cert)
		if got := parseAnswers(t, res.stdout); res.code != 0 || len(got) != 1 || got[0].Plugin != "fa3" {
			t.Errorf("dispatch --connect --tls-ca: exit %d %s %s", res.code, res.stdout, res.stderr)
		}
		res = host(t, tree, in, "dispatch", "--connect", "127.0.0.1:"+port, "--tls")
		if res.code == 0 {
			t.Errorf("dispatch --connect --tls trusted a self-signed certificate that no system CA signed: %s", res.stdout)
		}
	})

	t.Run("mutual TLS", func(t *testing.T) {
		port, code, stderr := serveTCP(t, tree, "--listen", "0.0.0.0:0", "--tls-cert", server.cert, "--tls-key", server.key, "--tls-client-ca", clientCA.cert)
		if port == "" {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		if err := dispatchOver(t, port, tlsCreds(client)); err != nil {
			t.Errorf("client with a certificate of the CA: %v", err)
		}
		if err := dispatchOver(t, port, tlsCreds(nil)); err == nil {
			t.Error("a client without a certificate was answered")
		}
		if err := dispatchOver(t, port, tlsCreds(stranger)); err == nil {
			t.Error("a client with a certificate of another CA was answered")
		}
		in := `{"backend":"fa3","forward_mode":"DECODE"}` + "\n"
		res := host(t, tree, in, "dispatch", "--connect", "127.0.0.1:"+port, "--tls-ca", server.cert, "--tls-cert", client.cert, "--tls-key", client.key)
		if got := parseAnswers(t, res.stdout); res.code != 0 || len(got) != 1 || got[0].Plugin != "fa3" {
			t.Errorf("dispatch --connect with a client certificate: exit %d %s %s", res.code, res.stdout, res.stderr)
		}
	})

	res := host(t, tree, "", "dispatch", "--tls-ca", server.cert)
	if res.code != 2 || !strings.Contains(res.stderr, "--connect") {
		t.Errorf("--tls-ca without --connect: exit %d %s", res.code, res.stderr)
	}
}

// checkServeRefusals: serve refuses, with exit status 2 and a message, a
// plaintext address beyond loopback and flags that do not go together.
func checkServeRefusals(t *testing.T, tree *testbin.Bins, dir string, server, clientCA *certPair) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr; exit status 2
	}{
		{"all interfaces, plaintext", []string{"--listen", "0.0.0.0:0"}, "0.0.0.0:0 is not a loopback address"},
		{"empty host, plaintext", []string{"--listen", ":0"}, ":0 is not a loopback address"},
		{"IPv6 any, plaintext", []string{"--listen", "[::]:0"}, "is not a loopback address"},
		{"cert without key", []string{"--listen", "0.0.0.0:0", "--tls-cert", server.cert}, "--tls-cert and --tls-key go together"},
		{"client CA without cert", []string{"--listen", "127.0.0.1:0", "--tls-client-ca", clientCA.cert}, "--tls-client-ca needs --tls-cert"},
		{"insecure and TLS", []string{"--listen", "0.0.0.0:0", "--insecure", "--tls-cert", server.cert, "--tls-key", server.key}, "--insecure and --tls-cert contradict"},
		{"missing key file", []string{"--listen", "0.0.0.0:0", "--tls-cert", server.cert, "--tls-key", filepath.Join(dir, "nope.key")}, "nope.key"},
		{"client CA without certificates", []string{"--listen", "0.0.0.0:0", "--tls-cert", server.cert, "--tls-key", server.key, "--tls-client-ca", server.key}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, code, stderr := serveTCP(t, tree, tc.args...)
			if port != "" || code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("serve %v: port %q, exit %d, want exit 2 saying %q:\n%s", tc.args, port, code, tc.want, stderr)
			}
			if strings.Contains(tc.want, "loopback") && !strings.Contains(stderr.String(), "--insecure") {
				t.Errorf("the refusal does not name --insecure:\n%s", stderr)
			}
		})
	}
}

// checkServePlaintext: plaintext on loopback is served without a warning,
// beyond it with --insecure and a warning.
func checkServePlaintext(t *testing.T, tree *testbin.Bins) {
	t.Run("loopback, plaintext", func(t *testing.T) {
		for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
			port, code, stderr := serveTCP(t, tree, "--listen", addr)
			if port == "" {
				t.Fatalf("serve --listen %s: exit %d:\n%s", addr, code, stderr)
			}
			if err := dispatchOver(t, port, insecure.NewCredentials()); err != nil {
				t.Errorf("%s: %v", addr, err)
			}
			if strings.Contains(stderr.String(), "[WARN]") {
				t.Errorf("a warning on loopback:\n%s", stderr)
			}
		}
	})

	t.Run("all interfaces, --insecure", func(t *testing.T) {
		port, code, stderr := serveTCP(t, tree, "--listen", "0.0.0.0:0", "--insecure")
		if port == "" {
			t.Fatalf("exit %d:\n%s", code, stderr)
		}
		if err := dispatchOver(t, port, insecure.NewCredentials()); err != nil {
			t.Error(err)
		}
		if !strings.Contains(stderr.String(), "[WARN]  attnplug.serve: serving plaintext gRPC without authentication") {
			t.Errorf("no warning:\n%s", stderr)
		}
	})
}

// TestServeRefusesMetricsBeyondLoopback: metrics on an address that is
// not loopback are refused (exit status 2) unless --metrics-insecure is
// given, which serves them and logs a warning; loopback needs nothing.
func TestServeRefusesMetricsBeyondLoopback(t *testing.T) {
	tree, err := bins.CopyTree(t.TempDir(), "flashinfer", "aiter", "ascend", "dsa", "intel_xpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		port, code, stderr := serveTCP(t, tree, "--listen", "127.0.0.1:0", "--metrics-listen", addr)
		if port != "" || code != 2 || !strings.Contains(stderr.String(), "--metrics-listen "+addr+" is not a loopback address") ||
			!strings.Contains(stderr.String(), "--metrics-insecure") {
			t.Errorf("--metrics-listen %s: port %q, exit %d, want exit 2 naming the address and --metrics-insecure:\n%s", addr, port, code, stderr)
		}
	}
	port, code, stderr := serveTCP(t, tree, "--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0", "--metrics-insecure")
	if port == "" {
		t.Fatalf("--metrics-insecure: exit %d:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "[WARN]  attnplug.serve: serving metrics over plain HTTP without authentication") {
		t.Errorf("--metrics-insecure: no warning:\n%s", stderr)
	}
	port, code, stderr = serveTCP(t, tree, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	if port == "" || strings.Contains(stderr.String(), "[WARN]") {
		t.Errorf("metrics on loopback: exit %d, or a warning:\n%s", code, stderr)
	}
}
