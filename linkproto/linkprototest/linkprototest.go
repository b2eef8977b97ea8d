// Package linkprototest makes pushes as the link hands them to a host, for
// tests: signed by a fixed mesh key, so that golden files can name it.
package linkprototest

import (
	"encoding/json"
	"fmt"

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
