// Package localsock lets the CLI ask a running `mesh-host serve` to run a
// read-only command against the journal it holds: bbolt forbids a second
// process from opening the file, even read-only, while the service has it.
//
// The client sends its command line; the service runs the very same command
// code and streams back stdout, stderr and the exit code, so output is the
// same whichever process answers. The socket is root-only: its directory is
// 0700, the socket 0600, and the service checks each peer's uid. It is not a
// general RPC layer and carries nothing but those three streams.
package localsock

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Errors returned by this package.
var (
	// ErrNoService is returned by Call when nothing listens on the socket.
	ErrNoService = errors.New("mesh-host service is not running")
	// ErrProtocol is returned when a frame cannot be read.
	ErrProtocol = errors.New("local socket protocol error")
)

// Frame types. The stream is a sequence of [type][uint32 length][data].
const (
	frameStdout byte = 1
	frameStderr byte = 2
	frameExit   byte = 3 // data: uint32 exit code; last frame
	maxFrame         = 1 << 20
	maxRequest       = 64 << 10
)

// Handler runs one command line and returns its exit code. ctx ends when the
// client goes away.
type Handler func(ctx context.Context, args []string, stdout, stderr io.Writer) int

type request struct {
	Args []string `json:"args"`
}

// Listen creates the socket at path: its directory 0700, the socket 0600. A
// stale socket left by a crashed service is replaced; a live one is an error.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	var l net.Listener
	err := withShortPath(path, func(addr string) error {
		if c, err := net.Dial("unix", addr); err == nil {
			c.Close()
			return fmt.Errorf("another mesh-host service answers there")
		}
		_ = os.Remove(path)
		ul, err := net.Listen("unix", addr)
		if err != nil {
			return err
		}
		// Removed by its real path on Close, never by the address.
		ul.(*net.UnixListener).SetUnlinkOnClose(false)
		l = &unlinkingListener{Listener: ul, path: path}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restrict %s: %w", path, err)
	}
	return l, nil
}

// Serve answers clients on l until ctx ends, then closes l and waits for the
// commands in flight to return.
func Serve(ctx context.Context, l net.Listener, h Handler) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on local socket: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			serveConn(ctx, c, h)
		}()
	}
}

func serveConn(ctx context.Context, c net.Conn, h Handler) {
	w := &frameWriter{w: bufio.NewWriter(c)}
	uid, known, err := checkPeer(c)
	if err != nil {
		fmt.Fprintf(w.stream(frameStderr), "mesh-host: %v\n", err)
		w.exit(2)
		return
	}
	var req request
	if err := json.NewDecoder(io.LimitReader(c, maxRequest)).Decode(&req); err != nil {
		fmt.Fprintf(w.stream(frameStderr), "mesh-host: bad request on local socket: %v\n", err)
		w.exit(2)
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if known {
		ctx = context.WithValue(ctx, peerKey{}, uid)
	}
	// The client never sends after its request: a read returning means it
	// hung up, and a follower must stop.
	go func() {
		_, _ = io.Copy(io.Discard, c)
		cancel()
	}()
	code := h(ctx, req.Args, w.stream(frameStdout), w.stream(frameStderr))
	w.exit(code)
}

// peerKey is the context key of the client's uid.
type peerKey struct{}

// PeerUID is the uid of the client whose command runs under ctx, as the
// kernel said it (SO_PEERCRED); false when not known (not on Linux, not
// a command from the socket).
func PeerUID(ctx context.Context) (uint32, bool) {
	uid, ok := ctx.Value(peerKey{}).(uint32)
	return uid, ok
}

// Call sends args to the service at path and copies its output to stdout and
// stderr, returning the command's exit code. It returns ErrNoService when
// nothing listens there.
func Call(ctx context.Context, path string, args []string, stdout, stderr io.Writer) (int, error) {
	var c net.Conn
	err := withShortPath(path, func(addr string) (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", addr)
		return err
	})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return 0, fmt.Errorf("%w (no socket at %s)", ErrNoService, path)
		}
		return 0, fmt.Errorf("dial %s: %w", path, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if err := json.NewEncoder(c).Encode(request{Args: args}); err != nil {
		return 0, fmt.Errorf("send to %s: %w", path, err)
	}
	r := bufio.NewReader(c)
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("%w: service closed the connection early: %v", ErrProtocol, err)
		}
		n := binary.BigEndian.Uint32(hdr[1:])
		if n > maxFrame {
			return 0, fmt.Errorf("%w: frame of %d bytes", ErrProtocol, n)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrProtocol, err)
		}
		switch hdr[0] {
		case frameStdout:
			_, err = stdout.Write(data)
		case frameStderr:
			_, err = stderr.Write(data)
		case frameExit:
			if n != 4 {
				return 0, fmt.Errorf("%w: exit frame of %d bytes", ErrProtocol, n)
			}
			return int(binary.BigEndian.Uint32(data)), nil
		default:
			return 0, fmt.Errorf("%w: frame type %d", ErrProtocol, hdr[0])
		}
		if err != nil {
			return 0, err
		}
	}
}

// frameWriter multiplexes streams onto one connection. Each Write is flushed
// so a follower sees records as they come.
type frameWriter struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

func (f *frameWriter) stream(t byte) io.Writer { return streamWriter{f, t} }

func (f *frameWriter) frame(t byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 || t == frameExit {
		chunk := p
		if len(chunk) > maxFrame {
			chunk = chunk[:maxFrame]
		}
		var hdr [5]byte
		hdr[0] = t
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(chunk)))
		if f.err == nil {
			_, f.err = f.w.Write(hdr[:])
		}
		if f.err == nil {
			_, f.err = f.w.Write(chunk)
		}
		p = p[len(chunk):]
		if t == frameExit {
			break
		}
	}
	if f.err == nil {
		f.err = f.w.Flush()
	}
	return f.err
}

func (f *frameWriter) exit(code int) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(code))
	_ = f.frame(frameExit, b[:])
}

type streamWriter struct {
	f *frameWriter
	t byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	if err := s.f.frame(s.t, p); err != nil {
		return 0, err
	}
	return len(p), nil
}
