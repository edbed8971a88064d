package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/bailinghub/knowledge-sidecar/config"
	"github.com/bailinghub/knowledge-sidecar/coreclient"
)

// CoreTLS is the TLS client configuration of every connection to Core —
// the pass-through transport and the Core client take the same one — or nil
// when core.ca_file is unset (the system roots). The CA file's certificates
// are trusted in addition to the system roots.
func CoreTLS(cfg config.Config) (*tls.Config, error) {
	if cfg.Core.CAFile == "" {
		return nil, nil
	}
	certs, err := readPEMCerts(cfg.Core.CAFile)
	if err != nil {
		return nil, fmt.Errorf("core.ca_file %q: %w", cfg.Core.CAFile, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, c := range certs {
		pool.AddCert(c)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// CoreClientTransport is the Core client's transport for cfg: its own
// pool to Core, built from the pass-through's settings
// (coreclient.NewTransport says why not the pass-through's pool), verifying
// with tlsCfg when core.ca_file is set (nil: the system roots).
func CoreClientTransport(cfg config.Config, tlsCfg *tls.Config) *http.Transport {
	return coreTransport(cfg, tlsCfg, cfg.Core.Timeout)
}

// coreTransport is a pool of its own to Core with the pass-through's dial
// and idle settings, waiting headerTimeout for Core's answer headers.
func coreTransport(cfg config.Config, tlsCfg *tls.Config, headerTimeout time.Duration) *http.Transport {
	t := coreclient.NewTransport(coreclient.TransportOptions{
		DialTimeout:           cfg.Proxy.DialTimeout,
		ResponseHeaderTimeout: headerTimeout,
		MaxIdleConnsPerHost:   cfg.Proxy.MaxIdleConnsPerHost,
	})
	if tlsCfg != nil {
		t.TLSClientConfig = tlsCfg.Clone()
	}
	return t
}

// readPEMCerts reads a PEM file that must hold one or more CERTIFICATE
// blocks and nothing else.
func readPEMCerts(path string) ([]*x509.Certificate, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errors.New("does not exist")
		}
		return nil, errors.New("cannot be read")
	}
	var certs []*x509.Certificate
	for rest := raw; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a PEM %q block; want only CERTIFICATE blocks", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse", len(certs)+1)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return certs, nil
}
