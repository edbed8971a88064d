package sharedredis

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bailinghub/knowledge-sidecar/internal/testkit"
	"github.com/bailinghub/knowledge-sidecar/internal/testkit/testdb"
)

// writePEM writes one PEM block to dir/name and returns the path.
func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tlsRedis starts a redis-server that speaks TLS only, with a certificate
// for 127.0.0.1 signed by a fresh private CA, and returns its address and
// the CA file. No redis-server: skip (fail with CI=true).
func tlsRedis(t *testing.T) (addr, caFile string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ks test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	caFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	certFile := writePEM(t, dir, "server.pem", "CERTIFICATE", srvDER)
	keyFile := writePEM(t, dir, "server.key", "EC PRIVATE KEY", keyDER)

	addr, _ = testkit.RedisServer(t, "--tls-port", "--port", "0",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	return addr, caFile
}

// TestTLSRealServer: rediss:// with ledger.redis_ca_file reaches a
// TLS-only Redis whose certificate a private CA signed and runs the shared
// rate limit (a Lua script, as the ledger's); without the CA the handshake
// fails (the system roots do not know it), with an error naming no address.
func TestTLSRealServer(t *testing.T) {
	addr, caFile := tlsRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := testClient(t, Options{URL: "rediss://" + addr + "/0", CAFile: caFile})
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping over TLS with the CA file: %v", err)
	}
	rl, _ := c.Limiter(testdb.RedisPrefix(t))
	if ok, _, err := rl.Allow(ctx, "s-tls", 1, 1); err != nil || !ok {
		t.Fatalf("rate limit over TLS: %v %v", ok, err)
	}

	plain := testClient(t, Options{URL: "rediss://" + addr + "/0", OpTimeout: 2 * time.Second})
	err := plain.Ping(ctx)
	if err == nil {
		t.Fatal("a certificate of an unknown CA was accepted without ledger.redis_ca_file")
	}
	if strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error names the address: %v", err)
	}
}
