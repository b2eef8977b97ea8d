package nodeservice

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// The system account's subjects for account JWTs: a server (every server
// of a cluster: system subjects are routed) answers a lookup with the JWT
// it holds and applies an update at once, closing the connections of users
// the update revokes. They are nats-server's, not the mesh's.
const (
	claimsLookupSubject = "$SYS.REQ.ACCOUNT.%s.CLAIMS.LOOKUP"
	claimsUpdateSubject = "$SYS.REQ.ACCOUNT.%s.CLAIMS.UPDATE"
	// lookupTimeout is short: a revocation has seconds to take effect.
	lookupTimeout = time.Second
)

// Accounts signs node credentials and revokes node keys: it re-signs the
// mesh account with the key revoked and pushes it to the broker over a
// system-user connection.
type Accounts struct {
	A *authority.Authority
	// Sys is a connection as the system user (DialSystem).
	Sys *nats.Conn
	// Now is the clock credentials are issued by.
	Now func() time.Time
}

var _ CredentialIssuer = (*Accounts)(nil)

// NodeJWT signs node's user JWT for key, valid for ttl.
func (x *Accounts) NodeJWT(node, key string, ttl time.Duration) (string, time.Time, error) {
	return x.A.NodeJWT(node, key, x.Now(), ttl)
}

// Revoke ends every credential of keys: the broker closes their
// connections and refuses them from then on.
func (x *Accounts) Revoke(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	// A broker that does not answer (an older one with a memory
	// resolver) is pushed what the data directory holds.
	current, _ := x.lookup(ctx)
	signed, err := x.A.RevokeKeys(keys, current)
	if err != nil {
		return err
	}
	return x.push(ctx, signed)
}

// claimsResponse is a server's answer to a claims update.
type claimsResponse struct {
	Data *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// lookup returns the mesh account JWT the broker holds.
func (x *Accounts) lookup(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	m, err := x.Sys.RequestWithContext(ctx, fmt.Sprintf(claimsLookupSubject, x.A.AccountPublicKey()), nil)
	if err != nil {
		return "", fmt.Errorf("ask the broker for the mesh account: %w", err)
	}
	return strings.TrimSpace(string(m.Data)), nil
}

// push hands the broker the account JWT signed.
func (x *Accounts) push(ctx context.Context, signed string) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	m, err := x.Sys.RequestWithContext(ctx, fmt.Sprintf(claimsUpdateSubject, x.A.AccountPublicKey()), []byte(signed))
	if err != nil {
		return fmt.Errorf("push the mesh account to the broker: %w", err)
	}
	var r claimsResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("push the mesh account to the broker: the answer %q: %w", m.Data, err)
	}
	if r.Error != nil {
		return fmt.Errorf("push the mesh account to the broker: %s (code %d)", r.Error.Description, r.Error.Code)
	}
	return nil
}

// DialSystem connects to urls as the system user. forever makes it a
// service's connection (keep trying, reconnect forever); otherwise it
// fails at once when the broker is not there.
func DialSystem(a *authority.Authority, urls []string, forever bool, log *slog.Logger) (*nats.Conn, error) {
	if len(urls) == 0 {
		var err error
		if urls, err = a.URLs(); err != nil {
			return nil, err
		}
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: give --nats, or start `meshctl serve` (it records where it listens)", ErrNoBroker)
	}
	tc, err := a.ClientTLS()
	if err != nil {
		return nil, err
	}
	opts := []nats.Option{
		nats.UserCredentials(a.SystemCreds()),
		nats.Secure(tc),
		nats.Name("meshctl system"),
		nats.Timeout(dialTimeout),
	}
	if forever {
		opts = append(opts, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				log.Error("broker error (system user)", "err", err)
			}))
	}
	nc, err := nats.Connect(strings.Join(urls, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s as the system user: %w", strings.Join(urls, ","), err)
	}
	return nc, nil
}
