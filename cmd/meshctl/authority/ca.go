package authority

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The mesh's certificate authority, beside the other keys.
const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca.key"
)

const (
	// caValidity is long: every node trusts the CA by its certificate,
	// and replacing it means enrolling every node again.
	caValidity = 20 * 365 * 24 * time.Hour
	// serverValidity bounds a broker certificate; the embedded broker
	// issues itself a new one (and a new key) well before it ends.
	serverValidity = 365 * 24 * time.Hour
	// clockSkew backdates what is issued, so a node whose clock is a
	// little behind still accepts it.
	clockSkew = time.Hour
)

// AdoptedCA is an operator's own certificate authority for InitWith to
// adopt instead of creating one. Key is nil when the operator keeps it:
// then the embedded broker cannot issue itself a certificate, and the
// broker's certificate comes from the operator.
type AdoptedCA struct {
	Cert, Key []byte
}

// ca is the mesh's certificate authority as the authority holds it.
type ca struct {
	pem  []byte
	cert *x509.Certificate
	// key is nil for an adopted CA whose key is not held.
	key crypto.Signer
}

// newCA creates a self-signed CA for mesh: ECDSA P-256, usable only to
// sign certificates.
func newCA(mesh string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "meshctl " + mesh + " CA", Organization: []string{"mesh " + mesh}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// It issues leaves only: a stolen broker key cannot be made into
		// a CA of its own.
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// parseCA reads a CA certificate (the first PEM block) and its key, if
// keyPEM is not nil, checking that the certificate is a CA's and the key
// is its.
func parseCA(certPEM, keyPEM []byte) (*ca, error) {
	cert, err := parseCACert(certPEM)
	if err != nil {
		return nil, err
	}
	c := &ca{pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), cert: cert}
	if keyPEM == nil {
		return c, nil
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, errors.New("the CA key is not PEM")
	}
	var key any
	switch b.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the CA key: a %T cannot sign", key)
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the CA key is not the key of the CA certificate")
	}
	c.key = signer
	return c, nil
}

// parseCACert reads the first certificate of certPEM and checks that it
// is a certificate authority's: a node's link trusts it and nothing else.
func parseCACert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("%q is not a certificate authority (basic constraints say CA:FALSE or nothing)", cert.Subject.CommonName)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%q may not sign certificates (key usage)", cert.Subject.CommonName)
	}
	return cert, nil
}

// readCA reads the CA in dir; nil, nil when dir holds none (an authority
// created before the broker served TLS).
func readCA(dir string) (*ca, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if errors.Is(err, fs.ErrNotExist) {
		keyPEM, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	c, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, caCertFile), err)
	}
	return c, nil
}

// ensureCA gives the authority in dir a CA if it has none: adopt's, or a
// new one. A CA already there is kept (every node trusts it); asking to
// adopt another is ErrCAMismatch.
func ensureCA(dir, mesh string, adopt *AdoptedCA, now time.Time) error {
	have, err := readCA(dir)
	if err != nil {
		return err
	}
	var certPEM, keyPEM []byte
	switch {
	case have != nil && adopt == nil:
		return nil
	case have != nil:
		want, err := parseCA(adopt.Cert, adopt.Key)
		if err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
		if !bytes.Equal(have.cert.Raw, want.cert.Raw) {
			return fmt.Errorf("%w: %s already holds the mesh's CA %q, which the nodes trust; enrol them again after moving the data directory aside to change it",
				ErrCAMismatch, dir, have.cert.Subject.CommonName)
		}
		if have.key != nil || adopt.Key == nil {
			return nil
		}
		keyPEM = adopt.Key // the same CA, now with its key
	case adopt != nil:
		if _, err := parseCA(adopt.Cert, adopt.Key); err != nil {
			return fmt.Errorf("--ca: %w", err)
		}
		certPEM, keyPEM = adopt.Cert, adopt.Key
	default:
		if certPEM, keyPEM, err = newCA(mesh, now); err != nil {
			return fmt.Errorf("create the CA: %w", err)
		}
	}
	// The key first: a ca.pem is only ever beside its key, when the key
	// is held.
	if keyPEM != nil {
		if err := writeFile(filepath.Join(dir, caKeyFile), keyPEM); err != nil {
			return err
		}
	}
	if certPEM != nil {
		return writeFile(filepath.Join(dir, caCertFile), certPEM)
	}
	return nil
}

// CAPEM is the mesh's CA certificate, PEM-encoded: what the nodes and
// every client trust the broker by.
func (a *Authority) CAPEM() []byte { return a.ca.pem }

// CAFile is the path of the CA certificate in the data directory.
func (a *Authority) CAFile() string { return filepath.Join(a.Dir, caCertFile) }

// HoldsCAKey says whether this authority can issue certificates.
func (a *Authority) HoldsCAKey() bool { return a.ca != nil && a.ca.key != nil }

// ClientTLS is the TLS configuration of every connection to the broker:
// it trusts the mesh's CA and nothing else, so a server that is not the
// mesh's broker is refused before anything is said to it.
func (a *Authority) ClientTLS() (*tls.Config, error) {
	if a.ca == nil {
		return nil, fmt.Errorf("%w: run `meshctl init` (it adds one)", ErrNoCA)
	}
	pool := x509.NewCertPool()
	pool.AddCert(a.ca.cert)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// IssueServerCert issues a broker a certificate for names (DNS names and
// IP addresses) with a key of its own, valid for about a year from now.
func (a *Authority) IssueServerCert(names []string, now time.Time) (tls.Certificate, error) {
	if !a.HoldsCAKey() {
		return tls.Certificate{}, fmt.Errorf("%w: %s has the CA certificate only", ErrNoCAKey, a.Dir)
	}
	if len(names) == 0 {
		return tls.Certificate{}, errors.New("issue a server certificate: no names")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(serverValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.ca.cert, &key.PublicKey, a.ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue a server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// WriteServerCert issues a certificate for names as IssueServerCert does
// and writes it (PEM, with the CA's after it) and its key into dir, for
// a NATS server of the operator's: it returns both paths.
func (a *Authority) WriteServerCert(dir string, names []string, now time.Time) (certFile, keyFile string, err error) {
	c, err := a.IssueServerCert(names, now)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return "", "", err
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), a.ca.pem...)
	if err := writeFile(certFile, chain); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}
