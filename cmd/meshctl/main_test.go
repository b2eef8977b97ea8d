package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/sealing"
)

// meshctl runs one command to completion.
func meshctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = runCLI(context.Background(), args, &out, &errOut, nil)
	return code, out.String(), errOut.String()
}

// syncBuffer is a buffer a running service writes its log to while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve runs `meshctl serve` with args until the test ends, and returns
// its log.
func serve(t *testing.T, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- runCLI(ctx, args, &bytes.Buffer{}, log, nil) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != command.ExitOK {
			t.Errorf("serve exited %d:\n%s", code, log)
		}
	})
	basetest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(log.String(), "answering hellos") {
			return fmt.Errorf("serve is not answering hellos:\n%s", log)
		}
		return nil
	})
	return log
}

// enrolled enrols node as mesh-host does, with the token `meshctl enrol`
// prints, and connects with the credentials a `meshctl serve` signed.
func enrolled(t *testing.T, data, node string) *nats.Conn {
	t.Helper()
	nc, _ := enrolledWith(t, data, node)
	return nc
}

// enrolledWith is enrolled, also returning the credentials file.
func enrolledWith(t *testing.T, data, node string, opts ...nats.Option) (*nats.Conn, string) {
	t.Helper()
	code, stdout, stderr := meshctl(t, "--data", data, "enrol", node)
	if code != command.ExitOK {
		t.Fatalf("enrol exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "can be redeemed once, until") {
		t.Errorf("enrol does not say the token is single-use and when it expires: %q", stderr)
	}
	tok, err := linkproto.ParseToken(stdout)
	if err != nil {
		t.Fatal(err)
	}
	key, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte(tok.CA), 0o600); err != nil {
		t.Fatal(err)
	}
	seal, err := sealing.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	sealPub, _ := seal.PublicKey()
	file, _, err := link.Enrol(context.Background(), tok, key, sealPub)
	if err != nil {
		t.Fatalf("redeem the token: %v", err)
	}
	creds := filepath.Join(t.TempDir(), node+".creds")
	if err := os.WriteFile(creds, file, 0o600); err != nil {
		t.Fatal(err)
	}
	opts = append([]nats.Option{nats.UserCredentials(creds), nats.RootCAs(ca), nats.CustomInboxPrefix(linkproto.InboxPrefix(tok.Mesh, node))}, opts...)
	nc, err := nats.Connect(strings.Join(tok.URLs, ","), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, creds
}

// configuredServer starts a NATS server configured as an operator would:
// its own settings, and the snippet `meshctl nats-config` prints. It
// returns the server's URL and a restart, which starts it again from the
// same configuration and directories (its URL does not change).
func configuredServer(t *testing.T, data string) (url string, restart func()) {
	t.Helper()
	dir := t.TempDir()
	code, snippet, stderr := meshctl(t, "--data", data, "nats-config", "--jwt-dir", filepath.Join(dir, "jwt"),
		"--tls-dir", filepath.Join(dir, "tls"), "--server-name", "127.0.0.1")
	if code != command.ExitOK {
		t.Fatalf("nats-config: %s", stderr)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(filepath.Join(dir, "mesh.conf"), []byte(snippet), 0o600); err != nil {
		t.Fatal(err)
	}
	var srv *server.Server
	start := func(port int) {
		full := fmt.Sprintf("host: 127.0.0.1\nport: %d\njetstream { store_dir: %q }\ninclude ./mesh.conf\n", port, filepath.Join(dir, "js"))
		if err := os.WriteFile(conf, []byte(full), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("the server does not take the snippet: %v\n%s", err, snippet)
		}
		opts.NoSigs, opts.NoLog = true, true
		srv, err = server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			t.Fatal("the server is not ready")
		}
	}
	start(-1)
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	port := srv.Addr().(*net.TCPAddr).Port
	return srv.ClientURL(), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		start(port)
	}
}

// TestRevokeOnTheEmbeddedBroker and TestRevokeOnAnExistingServer are
// requirement 4: `meshctl revoke` ends a connected node's access within
// 5 s, and it cannot reconnect, on both kinds of broker. Each logs the time
// from the command to the disconnection.
func TestRevokeOnTheEmbeddedBroker(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	serve(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--mesh", "lab", "--releases-listen", "off")
	revoke(t, data)
}

func TestRevokeOnAnExistingServer(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if code, _, stderr := meshctl(t, "--data", data, "init", "--mesh", "lab"); code != command.ExitOK {
		t.Fatalf("init: %s", stderr)
	}
	url, restart := configuredServer(t, data)
	serve(t, "--data", data, "--nats", url, "serve", "--releases-listen", "off")
	creds := revoke(t, data)
	_, other := enrolledWith(t, data, "web-2")
	// Restarted from the same configuration, whose preload is the account
	// before the revocation, the server keeps the one it was pushed.
	restart()
	if nc, err := nats.Connect(url, nats.RootCAs(filepath.Join(data, "ca.pem")), nats.UserCredentials(other)); err != nil {
		t.Fatalf("another node after the restart: %v", err)
	} else {
		nc.Close()
	}
	if nc, err := nats.Connect(url, nats.RootCAs(filepath.Join(data, "ca.pem")), nats.UserCredentials(creds)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("the revoked credentials after the server restarted: %v", err)
	}
}

func revoke(t *testing.T, data string) (creds string) {
	t.Helper()
	down := make(chan error, 16)
	refused := make(chan error, 16)
	nc, creds := enrolledWith(t, data, "web-1",
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.IgnoreAuthErrorAbort(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { down <- err }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refused <- err }))
	url := nc.ConnectedUrl()
	if !nc.IsConnected() {
		t.Fatal("not connected")
	}
	start := time.Now()
	code, stdout, stderr := meshctl(t, "--data", data, "revoke", "web-1")
	if code != command.ExitOK || !strings.HasPrefix(stdout, "revoked web-1 (key U") {
		t.Fatalf("revoke: exit %d: %s%s", code, stdout, stderr)
	}
	select {
	case err := <-down:
		t.Logf("meshctl revoke → node disconnected in %v (%v)", time.Since(start).Round(time.Microsecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("the node is still connected 5 s after meshctl revoke")
	}
	// The broker said why.
	select {
	case err := <-refused:
		if !errors.Is(err, nats.ErrAuthRevoked) {
			t.Errorf("the broker said %v, want its revocation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the broker did not say the credentials are revoked")
	}
	time.Sleep(300 * time.Millisecond) // several reconnect attempts
	if nc.IsConnected() {
		t.Fatal("the revoked node reconnected")
	}
	if _, err := nats.Connect(url, nats.RootCAs(filepath.Join(data, "ca.pem")), nats.UserCredentials(creds)); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("a new connection with the revoked credentials: %v", err)
	}
	code, stdout, _ = meshctl(t, "--data", data, "nodes")
	if code != command.ExitOK || !regexp.MustCompile(`(?m)^web-1 .* revoked [0-9.]+m?s ago +- +revoked$`).MatchString(stdout) {
		t.Errorf("nodes after revoke:\n%s", stdout)
	}
	return creds
}

func hello(node string) []byte {
	return linkproto.Marshal(linkproto.Hello{Protocol: linkproto.ProtocolVersion, Node: node, Version: "test"})
}

// TestServeOnAnExistingServer: the snippet `nats-config` prints is all an
// existing NATS server needs to serve the mesh; two `serve` against it
// answer each hello once between them.
func TestServeOnAnExistingServer(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if code, _, stderr := meshctl(t, "--data", data, "init", "--mesh", "lab"); code != command.ExitOK {
		t.Fatalf("init: %s", stderr)
	}
	url, _ := configuredServer(t, data)
	// TLS only, with the mesh's CA: a client trusting anything else is
	// refused before it says a word.
	if nc, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1)); err == nil {
		nc.Close()
		t.Fatalf("a client without the mesh's CA connected to %s", url)
	}

	logs := []*syncBuffer{
		serve(t, "--data", data, "--nats", url, "serve", "--log-level", "debug", "--releases-listen", "127.0.0.1:0"),
		serve(t, "--data", data, "--nats", url, "serve", "--log-level", "debug", "--releases-listen", "127.0.0.1:0"),
	}

	nc := enrolled(t, data, "web-1")
	replies, err := nc.SubscribeSync(linkproto.InboxPrefix("lab", "web-1") + ".hellos")
	if err != nil {
		t.Fatal(err)
	}
	const hellos = 20
	for range hellos {
		if err := nc.PublishRequest(linkproto.HelloSubject("lab", "web-1"), replies.Subject, hello("web-1")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range hellos {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("welcome %d of %d: %v", i+1, hellos, err)
		}
		var w linkproto.Welcome
		if err := linkproto.Decode(m.Data, linkproto.MaxDeclarationSize, &w); err != nil {
			t.Fatal(err)
		}
	}
	answered := func() (each []int, sum int) {
		for _, l := range logs {
			n := strings.Count(l.String(), `msg="hello answered"`)
			each = append(each, n)
			sum += n
		}
		return each, sum
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		if each, sum := answered(); sum < hellos {
			return fmt.Errorf("the services logged %v answers, want %d in all", each, hellos)
		}
		return nil
	})
	if m, err := replies.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a hello was answered twice: %s", m.Data)
	}
	each, sum := answered()
	if sum != hellos || each[0] == 0 || each[1] == 0 {
		t.Errorf("answers per service %v; want %d in all, shared by both", each, hellos)
	}

	// The operator's commands work against it too.
	decl := filepath.Join(t.TempDir(), "web-1.yaml")
	if err := os.WriteFile(decl, []byte("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n  - file: {path: /etc/motd, content: \"hi\\n\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := meshctl(t, "--data", data, "--nats", url, "declare", "--force", "web-1", decl); code != command.ExitOK || stdout != "web-1 is offline: it will get revision 1 when it reconnects\n" {
		t.Errorf("declare: %d %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := meshctl(t, "--data", data, "nodes"); code != command.ExitOK || !strings.Contains(stdout, "web-1  -        1        -") || !strings.Contains(stdout, "never heard") {
		t.Errorf("nodes: %d\n%s%s", code, stdout, stderr)
	}
}

// TestServeEmbedded: `serve` without --nats embeds the broker, records its
// address, and answers a node enrolled with the address it recorded.
func TestServeEmbedded(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	serve(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--mesh", "lab", "--releases-listen", "off")
	cfg, err := authority.ReadConfig(data)
	if err != nil || cfg.Mesh != "lab" || len(cfg.URLs) != 1 || !strings.HasPrefix(cfg.URLs[0], "tls://127.0.0.1:") || strings.HasSuffix(cfg.URLs[0], ":0") {
		t.Fatalf("control.json %+v, %v", cfg, err)
	}
	nc := enrolled(t, data, "web-1")
	m, err := nc.Request(linkproto.HelloSubject("lab", "web-1"), hello("web-1"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var w linkproto.Welcome
	if err := linkproto.Decode(m.Data, linkproto.MaxDeclarationSize, &w); err != nil || w.Declaration != nil {
		t.Fatalf("welcome %+v, %v", w, err)
	}
	for _, args := range [][]string{{"nodes"}, {"nodes", "--json"}, {"journal", "web-1"}} {
		if code, _, stderr := meshctl(t, append([]string{"--data", data}, args...)...); code != command.ExitOK {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	if code, _, stderr := meshctl(t, "--data", data, "journal", "web-1", "--why", "file:/etc/motd"); code != command.ExitFailed || !strings.Contains(stderr, `no record of web-1 names resource "file:/etc/motd"`) {
		t.Errorf("journal --why of nothing: exit %d: %s", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	if code, stdout, _ := meshctl(t, "version"); code != command.ExitOK || !strings.HasPrefix(stdout, version+"\nexecutable sha256:") {
		t.Errorf("version: %d %q; want the label, then the executable's digest", code, stdout)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{client.ErrRefused, command.ExitRefused},
		{fmt.Errorf("x: %w", linkproto.ErrInvalidName), command.ExitRefused},
		{client.ErrNotApplied, command.ExitFailed},
		{client.ErrApplyFailed, command.ExitFailed},
		{errors.New("broker gone"), command.ExitFailed},
	} {
		var ee *command.ExitError
		if !errors.As(classify(tc.err), &ee) || ee.Code != tc.code {
			t.Errorf("%v: exit %v, want %d", tc.err, ee, tc.code)
		}
	}
}
