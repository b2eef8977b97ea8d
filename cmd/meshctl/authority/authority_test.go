package authority

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
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
	if a.Mesh != defaultMesh {
		t.Errorf("mesh %q, want the default %q", a.Mesh, defaultMesh)
	}
	before := readAll(t, dir)

	again, created, err := Init(dir, defaultMesh)
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
		if _, _, err := a.IssueToken(node, []string{"nats://127.0.0.1:4222"}, time.Now(), time.Hour); !errors.Is(err, linkproto.ErrInvalidName) {
			t.Errorf("IssueToken(%q): %v, want ErrInvalidName", node, err)
		}
	}
}

func TestEnrolToken(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	if _, _, err := a.IssueToken("web-1", nil, now, time.Hour); !errors.Is(err, ErrNoBroker) {
		t.Fatalf("IssueToken with no address known: %v, want ErrNoBroker", err)
	}
	if err := a.SetURLs([]string{"nats://control.example:4222"}); err != nil {
		t.Fatal(err)
	}
	enc, _, err := a.IssueToken("web-1", nil, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := linkproto.VerifyToken(enc, a.SigningKey(), "lab")
	if err != nil {
		t.Fatalf("the token does not verify: %v", err)
	}
	if parsed.Mesh != "lab" || parsed.Node != "web-1" || !slices.Equal(parsed.URLs, []string{"nats://control.example:4222"}) || parsed.Protocol != linkproto.ProtocolVersion || parsed.CA != string(a.CAPEM()) {
		t.Errorf("token %+v", parsed)
	}
	if !parsed.Expires.Equal(now.Add(time.Hour)) {
		t.Errorf("expires %v, want an hour after %v", parsed.Expires, now)
	}
	// The token carries no private key, not even the bootstrap user's.
	linkprototest.NoSeed(t, "the token", linkprototest.TokenJSON(t, enc))
	boot, err := jwt.DecodeUserClaims(parsed.Bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if !boot.BearerToken || boot.Expires != parsed.Expires.Unix() {
		t.Errorf("bootstrap user: bearer %v, expires %d; want a bearer JWT expiring with the token", boot.BearerToken, boot.Expires)
	}
	if got, want := []string(boot.Pub.Allow), []string{"mesh.lab.enrol." + parsed.ID}; !slices.Equal(got, want) {
		t.Errorf("bootstrap pub allow %v, want %v", got, want)
	}
	if got, want := []string(boot.Sub.Allow), []string{"mesh.lab.enrolled." + parsed.ID + ".>"}; !slices.Equal(got, want) {
		t.Errorf("bootstrap sub allow %v, want %v", got, want)
	}
	again, _, err := a.IssueToken("web-1", []string{"nats://10.0.0.1:4222", "nats://10.0.0.2:4222"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if given, err := linkproto.ParseToken(again); err != nil || len(given.URLs) != 2 || given.ID == parsed.ID {
		t.Fatalf("IssueToken with --url: %+v, %v; want two urls and a new id", given, err)
	}
	cfg, err := ReadConfig(a.Dir)
	if err != nil || cfg.Mesh != "lab" {
		t.Errorf("control.json: %+v, %v", cfg, err)
	}
}

func TestNATSConfigSnippet(t *testing.T) {
	a, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	conf := a.NATSConfig("/var/lib/nats/jwt", NATSTLS{})
	for _, want := range []string{a.operatorJWT, a.systemJWT, a.accountJWT, "system_account: \"" + a.systemPub, "type: full", "dir: \"/var/lib/nats/jwt\"", "max_payload: 8388608"} {
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
