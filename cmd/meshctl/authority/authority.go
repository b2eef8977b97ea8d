package authority

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/internal/atomicfile"
	"github.com/mesh-host/mesh-host/linkproto"
)

// defaultMesh is the mesh an authority is created for when none is named.
const defaultMesh = "home"

// Files of the data directory. The operator and account seeds are kept,
// though serving needs only the JWTs and the signing key, so that the
// account can be re-signed (new limits, revocations) without a new
// operator, which every node and server trusts by its key.
const (
	operatorSeedFile = "operator.nk"
	operatorJWTFile  = "operator.jwt"
	systemSeedFile   = "system.nk"
	systemJWTFile    = "system.jwt"
	accountSeedFile  = "mesh.nk"
	accountJWTFile   = "mesh.jwt"
	signingSeedFile  = "mesh-signing.nk"
	// declarationsSeedFile signs what nodes obey: declarations, welcomes,
	// synceds. Its public half travels in every enrolment token.
	declarationsSeedFile = "declarations.nk"
	controlCredsFile     = "control.creds"
	// systemCredsFile is a user of the system account: what pushes the
	// mesh account's JWT to the broker when it changes (a revocation).
	systemCredsFile = "system.creds"
	// accountLockFile serialises changes to mesh.jwt between processes
	// sharing the data directory (serve's enrolments, revoke).
	accountLockFile = ".mesh.jwt.lock"
	// resolverDir is where the embedded broker keeps the account JWTs it
	// was pushed (its "full" resolver), so a revocation survives a restart.
	resolverDir  = "accounts"
	configFile   = "control.json"
	jetstreamDir = "jetstream"
)

// Config is DIR/control.json: which mesh the authority serves, where its
// broker listens and where it serves releases (written by serve; read by
// enrol and the operator commands when no address is given).
type Config struct {
	Mesh string   `json:"mesh"`
	URLs []string `json:"urls,omitempty"`
	// ReleasesURL is the base URL nodes fetch releases from, when serve
	// knows one (it listens on a given address).
	ReleasesURL string `json:"releases_url,omitempty"`
}

// Authority is the signing side of a mesh's security: the operator every
// server trusts, the system account, the mesh account and its signing key,
// and the control user's credentials. It lives in a directory only its
// owner can read.
type Authority struct {
	// Dir is the data directory.
	Dir string
	// Mesh is the mesh it serves.
	Mesh string

	operatorJWT string
	operator    *jwt.OperatorClaims
	systemPub   string
	systemJWT   string
	accountPub  string
	accountJWT  string
	signer      nkeys.KeyPair
	declKey     nkeys.KeyPair
	// ca is the mesh's certificate authority: nil in an authority
	// created before the broker served TLS, until Init adds one.
	ca *ca
}

// Init returns the authority in dir, creating it for mesh (defaultMesh
// when empty) if dir holds none; created says which. An existing authority
// for another mesh than a non-empty mesh is ErrMeshMismatch: its keys are
// what every node and server already trusts, so it is never replaced. An
// authority without a CA (made before the broker served TLS) is given one;
// its other keys stay as they are.
func Init(dir, mesh string) (a *Authority, created bool, err error) {
	return InitWith(dir, mesh, nil)
}

// InitWith is Init adopting adopt as the mesh's CA rather than creating
// one, when adopt is not nil. An authority that already has another CA
// is ErrCAMismatch.
func InitWith(dir, mesh string, adopt *AdoptedCA) (a *Authority, created bool, err error) {
	a, err = Open(dir)
	switch {
	case err == nil:
		if mesh != "" && mesh != a.Mesh {
			return nil, false, fmt.Errorf("%w: %s holds the authority of mesh %q, not %q", ErrMeshMismatch, dir, a.Mesh, mesh)
		}
		if a.ca != nil && adopt == nil {
			return a, false, nil
		}
		if err := ensureCA(dir, a.Mesh, adopt, time.Now()); err != nil {
			return nil, false, err
		}
		a, err = Open(dir)
		return a, false, err
	case !errors.Is(err, ErrNoAuthority):
		return nil, false, err
	}
	if mesh == "" {
		mesh = defaultMesh
	}
	if err := linkproto.ValidName(mesh); err != nil {
		return nil, false, fmt.Errorf("mesh: %w", err)
	}
	if adopt != nil {
		// Refused before any key is made for it.
		if _, err := parseCA(adopt.Cert, adopt.Key); err != nil {
			return nil, false, fmt.Errorf("--ca: %w", err)
		}
	}
	if err := create(dir, mesh); err != nil {
		return nil, false, fmt.Errorf("create the authority in %s: %w", dir, err)
	}
	if err := ensureCA(dir, mesh, adopt, time.Now()); err != nil {
		return nil, false, fmt.Errorf("create the authority in %s: %w", dir, err)
	}
	a, err = Open(dir)
	return a, err == nil, err
}

// create writes a new authority into dir. The operator JWT is written last:
// its presence is what Open takes for a complete authority.
func create(dir, mesh string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// MkdirAll leaves an existing directory's mode alone; the keys must
	// not be readable by anyone else.
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	operator, err := nkeys.CreateOperator()
	if err != nil {
		return err
	}
	system, err := nkeys.CreateAccount()
	if err != nil {
		return err
	}
	account, err := nkeys.CreateAccount()
	if err != nil {
		return err
	}
	signer, err := nkeys.CreateAccount()
	if err != nil {
		return err
	}
	operatorPub, _ := operator.PublicKey()
	systemPub, _ := system.PublicKey()
	accountPub, _ := account.PublicKey()
	signerPub, _ := signer.PublicKey()

	oc := jwt.NewOperatorClaims(operatorPub)
	oc.Name = "meshctl-" + mesh
	oc.SystemAccount = systemPub
	operatorJWT, err := oc.Encode(operator)
	if err != nil {
		return fmt.Errorf("sign the operator: %w", err)
	}

	sc := jwt.NewAccountClaims(systemPub)
	sc.Name = "SYS"
	systemJWT, err := sc.Encode(operator)
	if err != nil {
		return fmt.Errorf("sign the system account: %w", err)
	}

	ac := jwt.NewAccountClaims(accountPub)
	ac.Name = mesh
	// In operator mode an account has JetStream only if its limits say so.
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{DiskStorage: -1, MemoryStorage: -1, Streams: -1, Consumer: -1}
	ac.SigningKeys.Add(signerPub)
	accountJWT, err := ac.Encode(operator)
	if err != nil {
		return fmt.Errorf("sign the mesh account: %w", err)
	}

	controlCreds, err := userCreds(signer, accountPub, "meshctl-control", nil)
	if err != nil {
		return fmt.Errorf("sign the control user: %w", err)
	}

	seed := func(kp nkeys.KeyPair) []byte { s, _ := kp.Seed(); return append(s, '\n') }
	files := []struct {
		name string
		data []byte
	}{
		{operatorSeedFile, seed(operator)},
		{systemSeedFile, seed(system)},
		{systemJWTFile, []byte(systemJWT + "\n")},
		{accountSeedFile, seed(account)},
		{accountJWTFile, []byte(accountJWT + "\n")},
		{signingSeedFile, seed(signer)},
		{controlCredsFile, controlCreds},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	if _, err := declarationKey(dir); err != nil {
		return err
	}
	if err := createSystemCreds(dir); err != nil {
		return err
	}
	if err := writeConfig(dir, Config{Mesh: mesh}); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, operatorJWTFile), []byte(operatorJWT+"\n"))
}

// Open reads the authority in dir: ErrNoAuthority if there is none.
func Open(dir string) (*Authority, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	}
	operatorJWT, err := read(operatorJWTFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s has no %s (run `meshctl init`)", ErrNoAuthority, dir, operatorJWTFile)
	}
	if err != nil {
		return nil, err
	}
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	a := &Authority{Dir: dir, Mesh: cfg.Mesh, operatorJWT: operatorJWT}
	if a.operator, err = jwt.DecodeOperatorClaims(operatorJWT); err != nil {
		return nil, fmt.Errorf("%s: %w", operatorJWTFile, err)
	}
	if a.systemJWT, err = read(systemJWTFile); err != nil {
		return nil, err
	}
	sc, err := jwt.DecodeAccountClaims(a.systemJWT)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", systemJWTFile, err)
	}
	a.systemPub = sc.Subject
	if a.accountJWT, err = read(accountJWTFile); err != nil {
		return nil, err
	}
	ac, err := jwt.DecodeAccountClaims(a.accountJWT)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", accountJWTFile, err)
	}
	a.accountPub = ac.Subject
	seed, err := read(signingSeedFile)
	if err != nil {
		return nil, err
	}
	if a.signer, err = nkeys.FromSeed([]byte(seed)); err != nil {
		return nil, fmt.Errorf("%s: %w", signingSeedFile, err)
	}
	if pub, _ := a.signer.PublicKey(); !ac.SigningKeys.Contains(pub) {
		return nil, fmt.Errorf("%s is not a signing key of the mesh account in %s", signingSeedFile, accountJWTFile)
	}
	if _, err := os.Stat(a.ControlCreds()); err != nil {
		return nil, err
	}
	if _, err := os.Stat(a.SystemCreds()); errors.Is(err, fs.ErrNotExist) {
		// An authority made before revocation gains its system user here.
		if err := createSystemCreds(dir); err != nil {
			return nil, fmt.Errorf("create the system user: %w", err)
		}
	} else if err != nil {
		return nil, err
	}
	// An authority made before declarations were signed gains its key
	// here; nodes enrolled before it must be enrolled again to learn it.
	if a.declKey, err = declarationKey(dir); err != nil {
		return nil, err
	}
	if err := linkproto.ValidName(a.Mesh); err != nil {
		return nil, fmt.Errorf("%s: mesh: %w", configFile, err)
	}
	if a.ca, err = readCA(dir); err != nil {
		return nil, err
	}
	return a, nil
}

// createSystemCreds signs a user of the system account with its key and
// writes its credentials into dir.
func createSystemCreds(dir string) error {
	seed, err := os.ReadFile(filepath.Join(dir, systemSeedFile))
	if err != nil {
		return err
	}
	system, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return fmt.Errorf("%s: %w", systemSeedFile, err)
	}
	systemPub, _ := system.PublicKey()
	creds, err := userCreds(system, systemPub, "meshctl-system", nil)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, systemCredsFile), creds)
}

// declarationKey reads the mesh's declaration key from dir, making it on
// first use.
func declarationKey(dir string) (nkeys.KeyPair, error) {
	kp, err := keyFile(dir, declarationsSeedFile, linkproto.NewSigningKey, func(seed []byte) (nkeys.KeyPair, error) {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return nil, err
		}
		if pub, _ := kp.PublicKey(); linkproto.ValidSigningKey(pub) != nil {
			return nil, errors.New("not a mesh signing key")
		}
		return kp, nil
	})
	if err != nil {
		return nil, err
	}
	return linkproto.Prepared(kp)
}

// keyFile reads the key whose seed is DIR/name with parse, or, when there
// is none, makes one with create and writes its seed there (0600): keys an
// authority gained after it was first made are added on first use.
func keyFile(dir, name string, create func() (nkeys.KeyPair, error), parse func([]byte) (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		kp, err := create()
		if err != nil {
			return nil, err
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		if err := writeFile(path, append(seed, '\n')); err != nil {
			return nil, err
		}
		return kp, nil
	}
	if err != nil {
		return nil, err
	}
	kp, err := parse([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return kp, nil
}

// DeclarationKey is the mesh's declaration key: what signs declarations,
// welcomes and synceds.
func (a *Authority) DeclarationKey() nkeys.KeyPair { return a.declKey }

// SigningKey is the public half of the declaration key: what every node
// trusts, learnt from its enrolment token.
func (a *Authority) SigningKey() string {
	pub, _ := a.declKey.PublicKey()
	return pub
}

// ControlCreds is the path of the control user's credentials file: full
// permissions in the mesh account.
func (a *Authority) ControlCreds() string { return filepath.Join(a.Dir, controlCredsFile) }

// SystemCreds is the path of the system user's credentials file: it may
// push account JWTs to the broker.
func (a *Authority) SystemCreds() string { return filepath.Join(a.Dir, systemCredsFile) }

// ResolverDir is where the embedded broker keeps the account JWTs.
func (a *Authority) ResolverDir() string { return filepath.Join(a.Dir, resolverDir) }

// Operator is the operator's claims: the broker trusts it.
func (a *Authority) Operator() *jwt.OperatorClaims { return a.operator }

// SystemAccount is the system account's public key and JWT.
func (a *Authority) SystemAccount() (pub, token string) { return a.systemPub, a.systemJWT }

// Account is the mesh account's public key and its JWT as the authority
// was opened with it.
func (a *Authority) Account() (pub, token string) { return a.accountPub, a.accountJWT }

// AccountPublicKey is the mesh account's public key.
func (a *Authority) AccountPublicKey() string { return a.accountPub }

// accountJWTOnDisk is the mesh account's JWT as the data directory holds it now.
func (a *Authority) accountJWTOnDisk() (string, error) {
	b, err := os.ReadFile(filepath.Join(a.Dir, accountJWTFile))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// revokedForever is the time a revocation is entered at: the server
// refuses every JWT of a revoked key issued before it, so a far future
// time refuses every JWT of the key ever, including one a renewal racing
// the revocation signed a moment later. A node's key is made at enrolment
// and never used again once revoked.
var revokedForever = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// RevokeKeys adds keys (public user nkeys) to the mesh account's
// revocations, re-signs the account with the operator key and writes it
// to mesh.jwt, and returns the new JWT for the caller to push to the
// broker. current, when not empty, is the account JWT the broker holds:
// its revocations are kept too, so the account never goes backwards even
// when another data directory revoked something this one did not. Changes
// are serialised between the processes sharing the data directory.
func (a *Authority) RevokeKeys(keys []string, current string) (string, error) {
	for _, k := range keys {
		if !nkeys.IsValidPublicUserKey(k) {
			return "", fmt.Errorf("%q is not a public user nkey", k)
		}
	}
	unlock, err := lockFile(filepath.Join(a.Dir, accountLockFile))
	if err != nil {
		return "", err
	}
	defer unlock()
	onDisk, err := a.accountJWTOnDisk()
	if err != nil {
		return "", err
	}
	ac, err := jwt.DecodeAccountClaims(onDisk)
	if err != nil {
		return "", fmt.Errorf("%s: %w", accountJWTFile, err)
	}
	latest := ac.IssuedAt
	if current != "" {
		held, err := jwt.DecodeAccountClaims(current)
		if err != nil || held.Subject != ac.Subject {
			return "", fmt.Errorf("the broker's mesh account JWT: not the mesh account's (%v)", err)
		}
		for k, at := range held.Revocations {
			ac.RevokeAt(k, time.Unix(at, 0))
		}
		latest = max(latest, held.IssuedAt)
	}
	// A resolver keeps the JWT with the later issue time (in seconds) and
	// takes an equal one as newer: a preload of this account's previous
	// JWT, signed in the same second, would replace this one when the
	// server restarts. So each change is signed in a later second than
	// the last.
	for now := time.Now(); now.Unix() <= latest; now = time.Now() {
		time.Sleep(time.Unix(latest+1, 0).Sub(now))
	}
	for _, k := range keys {
		ac.RevokeAt(k, revokedForever)
	}
	seed, err := os.ReadFile(filepath.Join(a.Dir, operatorSeedFile))
	if err != nil {
		return "", err
	}
	operator, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return "", fmt.Errorf("%s: %w", operatorSeedFile, err)
	}
	signed, err := ac.Encode(operator)
	if err != nil {
		return "", fmt.Errorf("sign the mesh account: %w", err)
	}
	// On disk first: a broker restarted from here preloads it, and a
	// broker holding a newer one keeps its own.
	if err := writeFile(filepath.Join(a.Dir, accountJWTFile), []byte(signed+"\n")); err != nil {
		return "", err
	}
	a.accountJWT = signed
	return signed, nil
}

// lockFile takes an exclusive lock on name, creating it, and returns its
// release.
func lockFile(name string) (func(), error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { f.Close() }, nil
}

// StoreDir is where the embedded broker keeps JetStream's files.
func (a *Authority) StoreDir() string { return filepath.Join(a.Dir, jetstreamDir) }

// nodePermissions is everything node may do: publish only under its own
// up subjects, subscribe only under its own down subjects, and answer each
// request it receives once within a minute (its Ack to a push). Nothing
// else: no JetStream API, no KV, no other node's subjects.
func (a *Authority) nodePermissions(node string) jwt.Permissions {
	return jwt.Permissions{
		Pub:  jwt.Permission{Allow: jwt.StringList{linkproto.NodePublish(a.Mesh, node)}},
		Sub:  jwt.Permission{Allow: jwt.StringList{linkproto.NodeSubscribe(a.Mesh, node)}},
		Resp: &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute},
	}
}

// NodeJWT signs node's user JWT for key, the public half of a key the
// node made (its private half stays on the node): the node's permissions,
// issued at now and expiring ttl later.
func (a *Authority) NodeJWT(node, key string, now time.Time, ttl time.Duration) (string, time.Time, error) {
	if err := linkproto.ValidName(node); err != nil {
		return "", time.Time{}, fmt.Errorf("node: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(key) {
		return "", time.Time{}, fmt.Errorf("%q is not a public user nkey (starting with U)", key)
	}
	if ttl <= 0 {
		return "", time.Time{}, fmt.Errorf("credential lifetime %v: must be positive", ttl)
	}
	expires := now.Add(ttl).Truncate(time.Second)
	uc := jwt.NewUserClaims(key)
	uc.Name = node
	uc.IssuerAccount = a.accountPub
	uc.Expires = expires.Unix()
	uc.Permissions = a.nodePermissions(node)
	token, err := uc.Encode(a.signer)
	if err != nil {
		return "", time.Time{}, err
	}
	return token, expires, nil
}

// IssueToken returns node's enrolment token, signed and encoded: where to
// connect (urls or, when none are given, those control.json records), the
// mesh's signing key, and a bootstrap user valid until now+ttl that may
// only present the token. It holds no credentials of the node: those are
// signed when the token is redeemed, for a key the node makes.
func (a *Authority) IssueToken(node string, urls []string, now time.Time, ttl time.Duration) (string, linkproto.Token, error) {
	if err := linkproto.ValidName(node); err != nil {
		return "", linkproto.Token{}, fmt.Errorf("node: %w", err)
	}
	if ttl <= 0 {
		return "", linkproto.Token{}, fmt.Errorf("token lifetime %v: must be positive", ttl)
	}
	if len(urls) == 0 {
		cfg, err := ReadConfig(a.Dir)
		if err != nil {
			return "", linkproto.Token{}, err
		}
		urls = cfg.URLs
	}
	if len(urls) == 0 {
		return "", linkproto.Token{}, fmt.Errorf("%w: run `meshctl serve` once (it records where it listens) or give --url", ErrNoBroker)
	}
	if a.ca == nil {
		return "", linkproto.Token{}, fmt.Errorf("%w: run `meshctl init` (it adds one)", ErrNoCA)
	}
	t := linkproto.Token{
		Protocol:   linkproto.ProtocolVersion,
		ID:         linkproto.NewTokenID(),
		Mesh:       a.Mesh,
		Node:       node,
		URLs:       urls,
		SigningKey: a.SigningKey(),
		CA:         string(a.ca.pem),
		Expires:    now.Add(ttl).UTC().Truncate(time.Second),
		Issued:     now.UTC(),
	}
	// A bearer JWT: the bootstrap user needs no key of its own, so the
	// token carries no private key, and the JWT can do nothing but
	// present this token until it expires with it.
	boot, err := nkeys.CreateUser()
	if err != nil {
		return "", linkproto.Token{}, err
	}
	bootPub, _ := boot.PublicKey()
	uc := jwt.NewUserClaims(bootPub)
	uc.Name = "enrol-" + node
	uc.IssuerAccount = a.accountPub
	uc.BearerToken = true
	uc.Expires = t.Expires.Unix()
	uc.Permissions = jwt.Permissions{
		Pub: jwt.Permission{Allow: jwt.StringList{linkproto.EnrolSubject(a.Mesh, t.ID)}},
		Sub: jwt.Permission{Allow: jwt.StringList{linkproto.EnrolledPrefix(a.Mesh, t.ID) + ".>"}},
	}
	if t.Bootstrap, err = uc.Encode(a.signer); err != nil {
		return "", linkproto.Token{}, fmt.Errorf("sign the bootstrap user: %w", err)
	}
	enc, err := t.Sign(a.declKey)
	if err != nil {
		return "", linkproto.Token{}, err
	}
	return enc, t, nil
}

// userCreds signs a user of the mesh account with signer and returns its
// credentials file. perms nil means no restriction.
func userCreds(signer nkeys.KeyPair, accountPub, name string, perms *jwt.Permissions) ([]byte, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := user.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount = accountPub
	if perms != nil {
		uc.Permissions = *perms
	}
	token, err := uc.Encode(signer)
	if err != nil {
		return nil, err
	}
	seed, err := user.Seed()
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(token, seed)
}

// NATSTLS is where an existing NATS server finds its certificate and key,
// for the tls block of NATSConfig; empty paths print placeholders.
type NATSTLS struct {
	CertFile, KeyFile string
}

// NATSConfig is a configuration snippet for an existing NATS server (or
// every server of a cluster) to include, so that it trusts this authority:
// the operator, the system account, a "full" account resolver keeping its
// JWTs in jwtDir with both accounts preloaded, the payload limit
// declarations need, and TLS with a certificate from the mesh's CA, the
// only one nodes trust. The full resolver is what takes the account
// updates `meshctl revoke` pushes at runtime, keeps them across restarts
// and shares them within a cluster. The server must also enable JetStream
// itself.
func (a *Authority) NATSConfig(jwtDir string, t NATSTLS) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# meshctl: the authority of mesh %q (operator mode).\n", a.Mesh)
	b.WriteString("# Include it in the server's configuration; enable JetStream there too.\n")
	fmt.Fprintf(&b, "operator: %q\n", a.operatorJWT)
	fmt.Fprintf(&b, "system_account: %q\n", a.systemPub)
	b.WriteString("resolver: {\n")
	b.WriteString("  type: full\n")
	fmt.Fprintf(&b, "  dir: %q\n", jwtDir)
	b.WriteString("  allow_delete: false\n")
	b.WriteString("}\n")
	b.WriteString("# A preload older than what the resolver holds is ignored.\n")
	b.WriteString("resolver_preload: {\n")
	fmt.Fprintf(&b, "  %s: %q\n", a.systemPub, a.systemJWT)
	fmt.Fprintf(&b, "  %s: %q\n", a.accountPub, a.accountJWT)
	b.WriteString("}\n")
	fmt.Fprintf(&b, "max_payload: %d\n", linkproto.MaxDeclarationSize)
	b.WriteString("# Nodes and meshctl trust the mesh's CA and nothing else: the server's\n")
	b.WriteString("# certificate must be issued by it, for every name they connect by.\n")
	cert, key := t.CertFile, t.KeyFile
	if cert == "" || key == "" {
		if a.HoldsCAKey() {
			b.WriteString("# Replace the paths: `meshctl nats-config --tls-dir DIR --server-name NAME` issues them.\n")
		} else {
			b.WriteString("# Replace the paths with a certificate and key your CA (the one adopted with\n")
			b.WriteString("# `meshctl init --ca`) issued for the server: meshctl does not hold its key.\n")
		}
		cert, key = "/path/to/server-cert.pem", "/path/to/server-key.pem"
	}
	b.WriteString("tls {\n")
	fmt.Fprintf(&b, "  cert_file: %q\n", cert)
	fmt.Fprintf(&b, "  key_file: %q\n", key)
	b.WriteString("}\n")
	return b.String()
}

// ReadConfig reads DIR/control.json.
func ReadConfig(dir string) (Config, error) {
	var c Config
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", filepath.Join(dir, configFile), err)
	}
	return c, nil
}

// SetURLs records where the broker listens, for enrol and the operator
// commands.
func (a *Authority) SetURLs(urls []string) error {
	return a.updateConfig(func(c *Config) { c.URLs = urls })
}

// SetReleasesURL records the base URL nodes fetch releases from, for
// release; "" records none.
func (a *Authority) SetReleasesURL(url string) error {
	return a.updateConfig(func(c *Config) { c.ReleasesURL = url })
}

// ReleasesURL returns the base URL control.json records for releases.
func (a *Authority) ReleasesURL() (string, error) {
	c, err := ReadConfig(a.Dir)
	return c.ReleasesURL, err
}

// updateConfig rewrites control.json with change applied, keeping what
// change does not touch.
func (a *Authority) updateConfig(change func(*Config)) error {
	c, err := ReadConfig(a.Dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	c.Mesh = a.Mesh
	change(&c)
	return writeConfig(a.Dir, c)
}

// URLs returns the broker addresses control.json records.
func (a *Authority) URLs() ([]string, error) {
	c, err := ReadConfig(a.Dir)
	return c.URLs, err
}

func writeConfig(dir string, c Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, configFile), append(b, '\n'))
}

// writeFile replaces name with data atomically, readable by its owner only.
func writeFile(name string, data []byte) error { return atomicfile.Write(name, data, 0o600) }
