// Package linkprototest makes pushes as the link hands them to a host, for
// tests: signed by a fixed mesh key, so that golden files can name it.
package linkprototest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/linkproto"
)

// The mesh's declaration key in these tests.
const (
	SigningKeySeed = "SNAFUKXKTKNTW4XZM76AGTSNS6ZDDPDUIWJYLVD7YNXLBVJTTMO6LV65CM"
	SigningKeyPub  = "NBJMG7EVNEJ7C57O2KAFOHOG5BJED3YA5DKTA46N3YCCGR7M4CLGGN7F"
)

// Push is revision rev of document for node web-1 of mesh lab, signed by
// the mesh, by operator tester.
func Push(rev uint64, document string) *linkproto.Declaration {
	d := &linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "lab", Node: "web-1", Revision: rev, Document: json.RawMessage(document), Operator: "tester"}
	key, err := nkeys.FromSeed([]byte(SigningKeySeed))
	if err != nil {
		panic(err)
	}
	if err := d.Sign(key); err != nil {
		panic(err)
	}
	return d
}

// Doc is a declaration document of revision rev holding /etc/motd.
func Doc(rev uint64, motd string) string {
	return fmt.Sprintf(`{"mesh":"lab","node":"web-1","revision":%d,"resources":[{"file":{"path":"/etc/motd","content":%q}}]}`, rev, motd)
}

// seedPattern matches an nkey seed: S, its kind, and base32. An nkey seed
// is a whole run of 58 base32 characters; a public key (56) holds runs
// that look like the start of one, so the run is matched whole.
var seedPattern = regexp.MustCompile(`(?:^|[^A-Z2-7])(S[UAONCXP][A-Z2-7]{56})(?:[^A-Z2-7]|$)`)

// NoSeed fails t when text, named what, holds an nkey seed: a token, a
// credential or an output that must carry none.
func NoSeed(t testing.TB, what, text string) {
	t.Helper()
	if m := seedPattern.FindStringSubmatch(text); m != nil {
		t.Errorf("%s holds an nkey seed: %.8s…", what, m[1])
	}
}

// TokenJSON is the JSON an encoded enrolment token carries.
func TokenJSON(t testing.TB, enc string) string {
	t.Helper()
	body, _, _ := strings.Cut(strings.TrimPrefix(enc, "meshtoken2."), ".")
	b, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
