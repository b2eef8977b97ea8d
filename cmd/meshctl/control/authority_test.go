package control

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/mesh-host/mesh-host/linkproto"
)

func TestAuthorityCreatedOnceAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, err := Open(dir); !errors.Is(err, ErrNoAuthority) {
		t.Fatalf("Open of an empty directory: %v, want ErrNoAuthority", err)
	}
	a, created, err := Init(dir, "")
	if err != nil || !created {
		t.Fatalf("Init: created %v, err %v", created, err)
	}
	if a.Mesh != DefaultMesh {
		t.Errorf("mesh %q, want the default %q", a.Mesh, DefaultMesh)
	}
	before := readAll(t, dir)

	again, created, err := Init(dir, DefaultMesh)
	if err != nil || created {
		t.Fatalf("second Init: created %v, err %v", created, err)
	}
	if again.operatorJWT != a.operatorJWT || again.accountJWT != a.accountJWT {
		t.Error("the second Init made a new operator or account")
	}
	if after := readAll(t, dir); !maps.Equal(before, after) {
		t.Error("the second Init rewrote the authority's files")
	}
	if _, _, err := Init(dir, "other"); !errors.Is(err, ErrMeshMismatch) {
		t.Errorf("Init for another mesh: %v, want ErrMeshMismatch", err)
	}

	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", st.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", e.Name(), info.Mode().Perm())
		}
	}
	for _, f := range []string{operatorSeedFile, operatorJWTFile, systemSeedFile, systemJWTFile, accountSeedFile, accountJWTFile, signingSeedFile, controlCredsFile, configFile} {
		if _, ok := before[f]; !ok {
			t.Errorf("no %s in the data directory", f)
		}
	}
}

func TestAuthorityExistingDirectoryTightened(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Init(dir, "lab"); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(dir)
	if st.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v, want 0700", st.Mode().Perm())
	}
}

func TestAuthorityRefusesBadNames(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Init(dir, "Bad.Mesh"); !errors.Is(err, linkproto.ErrInvalidName) {
		t.Fatalf("Init with a bad mesh name: %v, want ErrInvalidName", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNoAuthority) {
		t.Fatalf("a refused Init left an authority: %v", err)
	}
	a, _, err := Init(dir, "lab")
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"", "b.>", "*", "B", "a b", strings.Repeat("x", 64)} {
		if _, err := a.Enrol(node, []string{"nats://127.0.0.1:4222"}); !errors.Is(err, linkproto.ErrInvalidName) {
			t.Errorf("Enrol(%q): %v, want ErrInvalidName", node, err)
		}
	}
}

func TestEnrolToken(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Enrol("web-1", nil); !errors.Is(err, ErrNoBroker) {
		t.Fatalf("Enrol with no address known: %v, want ErrNoBroker", err)
	}
	if err := a.SetURLs([]string{"nats://control.example:4222"}); err != nil {
		t.Fatal(err)
	}
	tok, err := a.Enrol("web-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := linkproto.ParseToken(tok.Encode())
	if err != nil {
		t.Fatalf("the token does not parse: %v", err)
	}
	if parsed.Mesh != "lab" || parsed.Node != "web-1" || !slices.Equal(parsed.URLs, []string{"nats://control.example:4222"}) || parsed.Protocol != linkproto.ProtocolVersion || parsed.CA != string(a.CAPEM()) {
		t.Errorf("token %+v", parsed)
	}
	given, err := a.Enrol("web-1", []string{"nats://10.0.0.1:4222", "nats://10.0.0.2:4222"})
	if err != nil || len(given.URLs) != 2 {
		t.Fatalf("Enrol with --url: %+v, %v", given, err)
	}
	if claims := userClaims(t, []byte(parsed.Creds)); claims.Name != "web-1" {
		t.Errorf("user name %q", claims.Name)
	}
	cfg, err := ReadConfig(a.Dir)
	if err != nil || cfg.Mesh != "lab" {
		t.Errorf("control.json: %+v, %v", cfg, err)
	}
}

func TestNodeCredsConnect(t *testing.T) {
	b := newBed(t)
	n := b.node("web-1")
	if !n.nc.IsConnected() {
		t.Fatal("not connected")
	}
	n.noErrors(t)
}

func TestNATSConfigSnippet(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	conf := a.NATSConfig(NATSTLS{})
	for _, want := range []string{a.operatorJWT, a.systemJWT, a.accountJWT, "system_account: \"" + a.systemPub, "resolver: MEMORY", "max_payload: 8388608"} {
		if !strings.Contains(conf, want) {
			t.Errorf("nats-config lacks %q:\n%s", want, conf)
		}
	}
}

func userClaims(t *testing.T, creds []byte) *jwt.UserClaims {
	t.Helper()
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}
