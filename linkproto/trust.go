package linkproto

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// caPool reads PEM certificates that must each be a certificate
// authority's: what a node (or a tool acting as one) trusts the broker by.
// n is how many it read.
func caPool(caPEM []byte) (pool *x509.CertPool, n int, err error) {
	pool = x509.NewCertPool()
	for {
		var block *pem.Block
		block, caPEM = pem.Decode(caPEM)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, 0, err
		}
		if !cert.BasicConstraintsValid || !cert.IsCA {
			return nil, 0, fmt.Errorf("%q is not a certificate authority", cert.Subject.CommonName)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, 0, errors.New("not a PEM certificate")
	}
	return pool, n, nil
}

// BrokerTLS is the TLS configuration of a node's connections to its
// broker: the CAs in caPEM are trusted, and nothing else (not the
// system's roots), so only the mesh's broker can answer.
func BrokerTLS(caPEM []byte) (*tls.Config, error) {
	pool, _, err := caPool(caPEM)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
