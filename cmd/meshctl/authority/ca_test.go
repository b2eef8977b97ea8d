package authority

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestCACreatedWithTheAuthority(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{caCertFile, caKeyFile} {
		fi, err := os.Stat(filepath.Join(a.Dir, name))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", name, fi, err)
		}
	}
	cert, err := parseCACert(a.CAPEM())
	if err != nil {
		t.Fatal(err)
	}
	if !cert.MaxPathLenZero || cert.NotAfter.Before(time.Now().AddDate(10, 0, 0)) {
		t.Errorf("CA: leaves only %v, until %v; want leaves only, for a decade at least", cert.MaxPathLenZero, cert.NotAfter)
	}
	again, err := Open(a.Dir)
	if err != nil || string(again.CAPEM()) != string(a.CAPEM()) || !again.HoldsCAKey() {
		t.Errorf("Open reads another CA: %v", err)
	}
}

// TestServerCertVerifies: what the CA issues verifies against the CA
// alone, for each of its names and for no other.
func TestServerCertVerifies(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c, err := a.IssueServerCert([]string{"broker.lab", "10.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := a.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	verify := func(name string) error {
		_, err := c.Leaf.Verify(x509.VerifyOptions{Roots: tc.RootCAs, DNSName: name, CurrentTime: now})
		return err
	}
	for _, name := range []string{"broker.lab", "10.0.0.1"} {
		if err := verify(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := verify("other.lab"); err == nil {
		t.Error("the certificate verifies for a name it is not for")
	}
	other, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	otc, _ := other.ClientTLS()
	if _, err := c.Leaf.Verify(x509.VerifyOptions{Roots: otc.RootCAs, DNSName: "broker.lab"}); err == nil {
		t.Error("another mesh's CA verifies the certificate")
	}
}
