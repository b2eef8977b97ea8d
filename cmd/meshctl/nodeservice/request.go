package nodeservice

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/linkproto"
)

// request is one kind of request the service answers, and how: every
// kind shares the skeleton answerRequest runs (who asks, the message
// decoded, the reply subject checked, an answer made within a deadline,
// signed, sent), and differs only in these.
type request[A any] struct {
	// what names the request in the log: "hello", "sync", "renewal".
	what string
	// from is who asks, read from the subject, and the prefix the reply
	// subject must have: the service may publish anywhere, so a reply
	// subject the asker chose freely would make it a confused deputy (an
	// answer published to another node's subjects, or to the JetStream
	// API, $JS.API.STREAM.DELETE.…).
	from func(subject string) (who, inbox string, err error)
	// decode reads the message into the handler's request and says which
	// node it names.
	decode func(data []byte) (names string, err error)
	// fromToken says the request names no node, the token it is made
	// with does (an enrolment); any other must name the node that asks.
	fromToken bool
	// answer makes the answer for who. An error leaves the request
	// unanswered: the asker asks again. A refusal the asker should be
	// told is an answer saying so.
	answer func(ctx context.Context, who string) (A, error)
	// sign signs the answer for who.
	sign func(a *A, who string) error
	// sent, if not nil, logs the answer sent.
	sent func(who string, a *A)
}

// answerRequest answers m as r says. A request that is not one (another
// mesh, a message that does not decode or names another node, a reply
// subject outside the asker's inbox) is logged and left unanswered:
// nothing a node sends can stop the service.
func answerRequest[A any](ctx context.Context, s *Service, m *nats.Msg, r request[A]) {
	who, inbox, err := r.from(m.Subject)
	if err != nil {
		s.Log.Warn(r.what+" on an unexpected subject", "subject", m.Subject, "err", err)
		return
	}
	names, err := r.decode(m.Data)
	if err == nil && !r.fromToken && names != who {
		err = fmt.Errorf("it names node %q", names)
	}
	if err != nil {
		s.Log.Warn("malformed "+r.what, "from", who, "err", err)
		return
	}
	if !strings.HasPrefix(m.Reply, inbox+".") {
		s.Log.Warn("malformed "+r.what, "from", who, "err", fmt.Sprintf("reply subject %q is not under %s", m.Reply, inbox))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	a, err := r.answer(ctx, who)
	if err == nil {
		err = r.sign(&a, who)
	}
	if err == nil {
		err = m.Respond(linkproto.Marshal(a))
	}
	if err != nil {
		s.Log.Error("cannot answer a "+r.what, "from", who, "err", err)
		return
	}
	if r.sent != nil {
		r.sent(who, &a)
	}
}

// fromNode reads the node a request comes from out of its subject
// (mesh.MESH.….NODE…), and its inbox.
func (s *Service) fromNode(subject string) (node, inbox string, err error) {
	mesh, node, err := linkproto.NodeOf(subject)
	if err == nil && mesh != s.Mesh {
		err = fmt.Errorf("mesh %q is not this service's", mesh)
	}
	if err != nil {
		return "", "", err
	}
	return node, linkproto.InboxPrefix(mesh, node), nil
}
