package control

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
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
	cert, err := ParseCACert(a.CAPEM())
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

func TestServerNames(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		host  string
		extra []string
		want  []string
	}{
		{"10.0.0.1", []string{"Broker.Lab."}, []string{"broker.lab", "10.0.0.1", "localhost", "127.0.0.1", "::1"}},
		{"0.0.0.0", nil, []string{"127.0.0.1", "localhost", "::1"}},
	} {
		got := ServerNames(tc.host, tc.extra)
		for _, w := range append(tc.want, host) {
			if !slices.Contains(got, w) {
				t.Errorf("ServerNames(%q, %q) = %q, want %q in it", tc.host, tc.extra, got, w)
			}
		}
		if slices.Contains(got, "0.0.0.0") {
			t.Errorf("ServerNames(%q) = %q: the unspecified address is no name", tc.host, got)
		}
	}
}

// TestServerCertRenewed: the embedded broker's certificate is reissued
// before it ends, not after.
func TestServerCertRenewed(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sc := &serverCert{now: func() time.Time { return now }, issue: func(now time.Time) (tls.Certificate, error) { return a.IssueServerCert([]string{"localhost"}, now) }}
	first, err := sc.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(serverValidity - serverRenew - time.Hour)
	if same, _ := sc.get(nil); same != first {
		t.Error("reissued early")
	}
	now = now.Add(2 * time.Hour)
	renewed, _ := sc.get(nil)
	if renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Errorf("not reissued within %v of its end", serverRenew)
	}
}
