package projector

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/mesh-host/mesh-host/journal/event"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns the time of the record with seq seq in the table tests.
func at(seq uint64) time.Time { return t0.Add(time.Duration(seq) * time.Second) }

// rec builds a record with payload p; seqs and times are set by numbered.
func rec(k event.Kind, resource string, p any) event.Record {
	return event.New(k, 0, resource, p)
}

// raw builds a record with a payload given as its bytes.
func raw(k event.Kind, resource, payload string) event.Record {
	r := event.Record{Kind: k, Resource: resource}
	if payload != "" {
		r.Payload = []byte(payload)
	}
	return r
}

// numbered gives recs seqs from 1 and times at(seq).
func numbered(recs ...event.Record) []event.Record {
	out := slices.Clone(recs)
	for i := range out {
		out[i].Seq = uint64(i + 1)
		out[i].Time = at(out[i].Seq)
	}
	return out
}

func applied(res string, a event.Action, digest, errText string) event.Record {
	return rec(event.ResourceApplied, res, event.ResourceAppliedPayload{Action: a, SpecDigest: digest, Error: errText})
}

const motd, issue = "file:/etc/motd", "file:/etc/issue"

func TestFold(t *testing.T) {
	started := event.ReconcileStartedPayload{
		Trigger: event.TriggerPushed, Revision: 7,
		Plan: []event.Step{{Resource: motd, Action: event.ActionCreate}, {Resource: issue, Action: event.ActionDelete}},
	}
	completed := event.ReconcileCompletedPayload{
		Trigger: event.TriggerPushed, Revision: 7, Result: event.ResultFailed,
		Started: at(1).In(time.FixedZone("CET", 3600)), Changed: 1, Unchanged: 2, Failed: 3,
	}
	declared := event.DeclarationReceivedPayload{
		Revision: 7, Digest: "sha256:decl", Source: "push",
		Resources: []event.DeclaredResource{{ID: motd, SpecDigest: "sha256:aa"}},
		Document:  []byte(`{"resources":[]}`),
		Operator:  "ops@example", Signer: "NSIGNER", Signature: "c2ln",
	}
	desired := &Desired{Revision: 7, Digest: "sha256:decl", Resources: declared.Resources, Seq: 1, Document: declared.Document,
		Source: "push", Operator: "ops@example", Signer: "NSIGNER", Signature: "c2ln"}
	tests := []struct {
		name string
		recs []event.Record
		want State
	}{
		{
			name: "nothing",
			want: State{},
		},
		{
			name: "created is owned",
			recs: numbered(applied(motd, event.ActionCreate, "sha256:aa", "")),
			want: State{Head: 1, Owned: map[string]Owned{motd: {SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 1}}},
		},
		{
			name: "updated takes the new digest",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				applied(motd, event.ActionUpdate, "sha256:bb", ""),
			),
			want: State{Head: 2, Owned: map[string]Owned{motd: {SpecDigest: "sha256:bb", LastOutcome: event.ActionUpdate, Seq: 2}}},
		},
		{
			name: "unchanged of an unowned resource owns it",
			recs: numbered(applied(motd, event.ActionUnchanged, "sha256:aa", "")),
			want: State{Head: 1, Owned: map[string]Owned{motd: {SpecDigest: "sha256:aa", LastOutcome: event.ActionUnchanged, Seq: 1}}},
		},
		{
			name: "deleted is no longer owned",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				applied(issue, event.ActionCreate, "sha256:cc", ""),
				applied(motd, event.ActionDelete, "", ""),
			),
			want: State{Head: 3, Owned: map[string]Owned{issue: {SpecDigest: "sha256:cc", LastOutcome: event.ActionCreate, Seq: 2}}},
		},
		{
			name: "released is no longer owned",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				applied(motd, event.ActionReleased, "", ""),
			),
			want: State{Head: 2},
		},
		{
			name: "deleted of an unowned resource changes nothing",
			recs: numbered(applied(motd, event.ActionDelete, "", "")),
			want: State{Head: 1},
		},
		{
			name: "failed keeps the digest and drift of an owned resource",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				rec(event.DriftObserved, motd, event.DriftObservedPayload{Differs: []string{"mode"}}),
				applied(motd, event.ActionFailed, "sha256:bb", "permission denied"),
			),
			want: State{Head: 3, Owned: map[string]Owned{motd: {
				SpecDigest: "sha256:aa", LastOutcome: event.ActionFailed, Seq: 3, Drifted: true, Error: "permission denied",
			}}},
		},
		{
			name: "a failed create is not owned: nothing was applied; it is failing",
			recs: numbered(applied(motd, event.ActionFailed, "sha256:bb", "no space")),
			want: State{Head: 1, Failing: map[string]Failure{motd: {SpecDigest: "sha256:bb", Error: "no space", Seq: 1}}},
		},
		{
			name: "failing ends when it applies, or when a declaration no longer names it",
			recs: numbered(
				applied(motd, event.ActionFailed, "sha256:bb", "no space"),
				applied(issue, event.ActionFailed, "sha256:cc", "no space"),
				applied(motd, event.ActionCreate, "sha256:bb", ""),
				rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 2, Source: "push",
					Resources: []event.DeclaredResource{{ID: motd, SpecDigest: "sha256:bb"}}}),
			),
			want: State{Head: 4,
				Desired: &Desired{Revision: 2, Seq: 4, Source: "push", Resources: []event.DeclaredResource{{ID: motd, SpecDigest: "sha256:bb"}}},
				Owned:   map[string]Owned{motd: {SpecDigest: "sha256:bb", LastOutcome: event.ActionCreate, Seq: 3}}},
		},
		{
			name: "success after failure clears the error",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				applied(motd, event.ActionFailed, "sha256:bb", "no space"),
				applied(motd, event.ActionUpdate, "sha256:bb", ""),
			),
			want: State{Head: 3, Owned: map[string]Owned{motd: {SpecDigest: "sha256:bb", LastOutcome: event.ActionUpdate, Seq: 3}}},
		},
		{
			name: "the last good declaration and each resource's last good spec",
			recs: numbered(
				rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 3, Digest: "sha256:d3", Source: "push"}),
				rec(event.ReconcileStarted, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed, Revision: 3}),
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{Trigger: event.TriggerPushed, Revision: 3, Result: event.ResultConverged, Changed: 1}),
				rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 4, Digest: "sha256:d4", Source: "push"}),
				rec(event.ReconcileStarted, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed, Revision: 4}),
				applied(motd, event.ActionFailed, "sha256:bb", "disk full"),
				applied(issue, event.ActionFailed, "sha256:cc", "disk full"),
				rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{Trigger: event.TriggerPushed, Revision: 4, Result: event.ResultFailed, Failed: 2}),
			),
			want: State{
				Head:     9,
				Desired:  &Desired{Revision: 4, Digest: "sha256:d4", Seq: 5, Source: "push"},
				Owned:    map[string]Owned{motd: {SpecDigest: "sha256:aa", GoodRevision: 3, LastOutcome: event.ActionFailed, Seq: 7, Error: "disk full"}},
				Failing:  map[string]Failure{issue: {SpecDigest: "sha256:cc", Error: "disk full", Seq: 8}},
				LastGood: &LastGood{Revision: 3, Digest: "sha256:d3", Seq: 1, Converged: 4, At: at(4)},
				LastReconcile: &Reconcile{Seq: 9, Trigger: event.TriggerPushed, Revision: 4, Result: event.ResultFailed,
					Completed: at(9), Failed: 2},
			},
		},
		{
			name: "a converged reconcile of a revision overtaken by a push is not the last good",
			recs: numbered(
				rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 3, Digest: "sha256:d3", Source: "push"}),
				rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 4, Digest: "sha256:d4", Source: "push"}),
				rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{Trigger: event.TriggerPushed, Revision: 3, Result: event.ResultConverged}),
			),
			want: State{
				Head:          3,
				Desired:       &Desired{Revision: 4, Digest: "sha256:d4", Seq: 2, Source: "push"},
				LastReconcile: &Reconcile{Seq: 3, Trigger: event.TriggerPushed, Revision: 3, Result: event.ResultConverged, Completed: at(3)},
			},
		},
		{
			name: "drift marks an owned resource and keeps its seq",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				rec(event.DriftObserved, motd, event.DriftObservedPayload{Differs: []string{"content"}, Wanted: "sha256:aa", Seen: "sha256:zz"}),
			),
			want: State{Head: 2, Owned: map[string]Owned{motd: {SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 1, Drifted: true}}},
		},
		{
			name: "drift of an unowned resource is ignored",
			recs: numbered(rec(event.DriftObserved, motd, event.DriftObservedPayload{Differs: []string{"absent"}})),
			want: State{Head: 1},
		},
		{
			name: "unchanged after drift clears it",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				rec(event.DriftObserved, motd, event.DriftObservedPayload{Differs: []string{"content"}}),
				applied(motd, event.ActionUnchanged, "sha256:aa", ""),
			),
			want: State{Head: 3, Owned: map[string]Owned{motd: {SpecDigest: "sha256:aa", LastOutcome: event.ActionUnchanged, Seq: 3}}},
		},
		{
			name: "reconcile.started is pending",
			recs: numbered(rec(event.ReconcileStarted, "", started)),
			want: State{Head: 1, Pending: &Pending{Seq: 1, Trigger: event.TriggerPushed, Revision: 7, Plan: started.Plan}},
		},
		{
			name: "reconcile.completed closes it",
			recs: numbered(rec(event.ReconcileStarted, "", started), rec(event.ReconcileCompleted, "", completed)),
			want: State{Head: 2, LastReconcile: &Reconcile{
				Seq: 2, Trigger: event.TriggerPushed, Revision: 7, Result: event.ResultFailed,
				Started: at(1), Completed: at(2), Changed: 1, Unchanged: 2, Failed: 3,
			}},
		},
		{
			name: "quiet reconcile.completed with no start",
			recs: numbered(rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{
				Trigger: event.TriggerTimer, Revision: 3, Result: event.ResultConverged, Started: t0, Unchanged: 4, Quiet: true,
			})),
			want: State{Head: 1, LastReconcile: &Reconcile{
				Seq: 1, Trigger: event.TriggerTimer, Revision: 3, Result: event.ResultConverged,
				Started: t0, Completed: at(1), Unchanged: 4, Quiet: true,
			}},
		},
		{
			name: "declaration.received is desired",
			recs: numbered(rec(event.DeclarationReceived, "", declared)),
			want: State{Head: 1, Desired: desired},
		},
		{
			name: "declaration.refused changes only head",
			recs: numbered(
				rec(event.DeclarationReceived, "", declared),
				rec(event.DeclarationRefused, "", event.DeclarationRefusedPayload{Revision: 8, Source: "push", Reason: "bad spec"}),
			),
			want: State{Head: 2, Desired: desired},
		},
		{
			name: "declaration.reapplied keeps the desired declaration and the record that holds it",
			recs: numbered(
				rec(event.DeclarationReceived, "", declared),
				event.New(event.DeclarationReapplied, 1, "", event.DeclarationReappliedPayload{Revision: 7, Digest: "sha256:decl", Source: "file:/d.yaml"}),
			),
			want: State{Head: 2, Desired: desired},
		},
		{
			name: "host.started is running",
			recs: numbered(
				rec(event.HostStarted, "", event.HostStartedPayload{Version: "v1", PID: 10, Build: "b1"}),
				rec(event.HostStarted, "", event.HostStartedPayload{Version: "v2", PID: 20}),
			),
			want: State{Head: 2, Running: &Running{Version: "v2", PID: 20, Since: at(2), Seq: 2}},
		},
		{
			name: "host.started of a managed version keeps its build",
			recs: numbered(rec(event.HostStarted, "", event.HostStartedPayload{Version: "abc123", PID: 10, Build: "v1.2"})),
			want: State{Head: 1, Running: &Running{Version: "abc123", Build: "v1.2", PID: 10, Since: at(1), Seq: 1}},
		},
		{
			name: "version.confirmed is known good",
			recs: numbered(
				rec(event.VersionConfirmed, "", event.VersionPayload{Version: "v1"}),
				rec(event.VersionConfirmed, "", event.VersionPayload{Version: "v2"}),
			),
			want: State{Head: 2, KnownGood: "v2"},
		},
		{
			name: "versions in order of delivery, redelivered last",
			recs: numbered(
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v1"}),
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v2"}),
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v3"}),
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v1"}),
			),
			want: State{Head: 4, Versions: []string{"v2", "v3", "v1"}},
		},
		{
			name: "version.retired removes",
			recs: numbered(
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v1"}),
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v2"}),
				rec(event.VersionRetired, "", event.VersionPayload{Version: "v1"}),
				rec(event.VersionRetired, "", event.VersionPayload{Version: "v9"}),
			),
			want: State{Head: 4, Versions: []string{"v2"}},
		},
		{
			name: "version.retired of the last leaves none",
			recs: numbered(
				rec(event.VersionDelivered, "", event.VersionPayload{Version: "v1"}),
				rec(event.VersionRetired, "", event.VersionPayload{Version: "v1"}),
			),
			want: State{Head: 2},
		},
		{
			name: "version.rolled-back changes neither running nor known good, and marks its version bad",
			recs: numbered(
				rec(event.HostStarted, "", event.HostStartedPayload{Version: "v2", PID: 20}),
				rec(event.VersionConfirmed, "", event.VersionPayload{Version: "v1"}),
				rec(event.VersionRolledBack, "", event.VersionRolledBackPayload{From: "v2", To: "v1", Reason: "no confirm"}),
			),
			want: State{Head: 3, Running: &Running{Version: "v2", PID: 20, Since: at(1), Seq: 1}, KnownGood: "v1", Bad: []string{"v2"}},
		},
		{
			name: "host.facts keeps the machine's latest facts",
			recs: numbered(
				rec(event.HostFacts, "", event.HostFactsPayload{Hostname: "web-1", Kernel: "6.1", Addresses: []string{"10.0.0.5"}}),
				rec(event.HostFacts, "", event.HostFactsPayload{Hostname: "web-1", Kernel: "6.12"}),
			),
			want: State{Head: 2, Facts: &event.HostFactsPayload{Hostname: "web-1", Kernel: "6.12"}},
		},
		{
			name: "a refresh is owed from its first change until done, whatever fails in between",
			recs: numbered(
				rec(event.RefreshOwed, "unit:web.service", event.RefreshOwedPayload{Source: motd, Change: event.ActionUpdate, Refresh: "reload"}),
				rec(event.RefreshOwed, "unit:web.service", event.RefreshOwedPayload{Source: issue, Change: event.ActionCreate, Repair: true, Refresh: "reload"}),
				rec(event.RefreshOwed, "unit:web.service", event.RefreshOwedPayload{Source: motd, Change: event.ActionUpdate, Refresh: "reload"}),
				rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{Result: event.ResultFailed}),
				rec(event.RefreshFailed, "unit:web.service", event.RefreshFailedPayload{Error: "job failed"}),
				rec(event.HostStarted, "", event.HostStartedPayload{Version: "v2", PID: 7}),
				rec(event.RefreshOwed, "unit:db.service", event.RefreshOwedPayload{Source: motd, Change: event.ActionUpdate, Refresh: "restart", Interrupted: 3}),
				rec(event.RefreshDone, "unit:db.service", event.RefreshDonePayload{Did: "restarted", Sources: []string{motd}}),
				rec(event.RefreshFailed, "unit:db.service", event.RefreshFailedPayload{Error: "not owed: ignored"}),
			),
			want: State{Head: 9,
				LastReconcile: &Reconcile{Seq: 4, Result: event.ResultFailed, Completed: at(4)},
				Running:       &Running{Version: "v2", PID: 7, Since: at(6), Seq: 6},
				Refreshes: map[string]OwedRefresh{"unit:web.service": {
					Sources: []RefreshSource{{Resource: motd, Change: event.ActionUpdate, Seq: 1}, {Resource: issue, Change: event.ActionCreate, Repair: true, Seq: 2}},
					Refresh: "reload", Since: at(1), Seq: 1, Error: "job failed", FailedSeq: 5,
				}},
			},
		},
		{
			name: "a declaration that no longer declares a resource drops what it owed and its skip",
			recs: numbered(
				rec(event.RefreshOwed, "unit:web.service", event.RefreshOwedPayload{Source: motd, Change: event.ActionUpdate, Refresh: "restart"}),
				rec(event.RefreshOwed, "unit:db.service", event.RefreshOwedPayload{Source: motd, Change: event.ActionUpdate, Refresh: "restart"}),
				rec(event.ResourceSkipped, "unit:db.service", event.ResourceSkippedPayload{Requirement: motd}),
				rec(event.ResourceSkipped, issue, event.ResourceSkippedPayload{Requirement: motd}),
				rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 2, Resources: []event.DeclaredResource{{ID: "unit:web.service"}, {ID: issue}}}),
				applied(issue, event.ActionCreate, "sha256:aa", ""),
			),
			want: State{Head: 6,
				Desired:   &Desired{Revision: 2, Resources: []event.DeclaredResource{{ID: "unit:web.service"}, {ID: issue}}, Seq: 5},
				Owned:     map[string]Owned{issue: {SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 6}},
				Refreshes: map[string]OwedRefresh{"unit:web.service": {Sources: []RefreshSource{{Resource: motd, Change: event.ActionUpdate, Seq: 1}}, Refresh: "restart", Since: at(1), Seq: 1}},
			},
		},
		{
			name: "every id a user or group held stays reserved; what the host made is its to remove until removed",
			recs: numbered(
				rec(event.ResourceApplied, "user:shop", event.ResourceAppliedPayload{Action: event.ActionCreate, SpecDigest: "sha256:aa",
					IDs: []event.HeldID{{Kind: "uid", ID: 1001, Name: "shop", Made: true}, {Kind: "gid", ID: 1001, Name: "shop", Made: true}}}),
				rec(event.ResourceApplied, "group:www-data", event.ResourceAppliedPayload{Action: event.ActionUnchanged, SpecDigest: "sha256:bb",
					IDs: []event.HeldID{{Kind: "gid", ID: 33, Name: "www-data"}, {Kind: "shell", ID: 1, Name: "x"}}}),
				rec(event.ResourceApplied, "user:shop", event.ResourceAppliedPayload{Action: event.ActionDelete}),
				rec(event.ResourceApplied, "user:other", event.ResourceAppliedPayload{Action: event.ActionCreate, SpecDigest: "sha256:cc",
					IDs: []event.HeldID{{Kind: "uid", ID: 1001, Name: "other", Made: true}}}),
			),
			want: State{Head: 4,
				Owned: map[string]Owned{
					"group:www-data": {SpecDigest: "sha256:bb", LastOutcome: event.ActionUnchanged, Seq: 2},
					"user:other":     {SpecDigest: "sha256:cc", LastOutcome: event.ActionCreate, Seq: 4},
				},
				IDs:  map[string]string{"uid:1001": "shop", "gid:1001": "shop", "gid:33": "www-data"},
				Made: map[string]string{"user:other": "user:other"},
			},
		},
		{
			name: "a bad version is bad until retired or confirmed",
			recs: numbered(
				rec(event.VersionRolledBack, "", event.VersionRolledBackPayload{From: "v2", To: "v1"}),
				rec(event.VersionRolledBack, "", event.VersionRolledBackPayload{From: "v3", To: "v1"}),
				rec(event.VersionRolledBack, "", event.VersionRolledBackPayload{From: "v2", To: "v1"}),
				rec(event.VersionRetired, "", event.VersionPayload{Version: "v3"}),
				rec(event.VersionRolledBack, "", event.VersionRolledBackPayload{From: "v4", To: "v1"}),
				rec(event.VersionConfirmed, "", event.VersionPayload{Version: "v4"}),
			),
			want: State{Head: 6, KnownGood: "v4", Bad: []string{"v2"}},
		},
		{
			name: "version.stood-aside changes only head",
			recs: numbered(rec(event.VersionStoodAside, "", event.VersionStoodAsidePayload{Running: "v1", Newer: "v2", Reason: "upgrade"})),
			want: State{Head: 1},
		},
		{
			name: "journal.compacted changes only head",
			recs: numbered(rec(event.JournalCompacted, "", event.JournalCompactedPayload{Through: 100, Dropped: 90})),
			want: State{Head: 1},
		},
		{
			name: "link.up",
			recs: numbered(rec(event.LinkUp, "", event.LinkPayload{Broker: "nats://a:4222"})),
			want: State{Head: 1, Link: Link{Up: true, Broker: "nats://a:4222", Since: at(1)}},
		},
		{
			name: "link.down",
			recs: numbered(
				rec(event.LinkUp, "", event.LinkPayload{Broker: "nats://a:4222"}),
				rec(event.LinkDown, "", event.LinkPayload{Broker: "nats://a:4222", Reason: "eof"}),
			),
			want: State{Head: 2, Link: Link{Broker: "nats://a:4222", Since: at(2), Reason: "eof"}},
		},
		{
			name: "empty payload decodes as the zero payload",
			recs: numbered(raw(event.LinkUp, "", "")),
			want: State{Head: 1, Link: Link{Up: true, Since: at(1)}},
		},
		{
			name: "unknown kind is counted",
			recs: numbered(raw("future.kind", motd, `{"whatever":1}`), raw("", "", "")),
			want: State{Head: 2, Unknown: 2},
		},
		{
			name: "unknown payload fields are ignored",
			recs: numbered(raw(event.HostStarted, "", `{"version":"v3","pid":7,"future":true}`)),
			want: State{Head: 1, Running: &Running{Version: "v3", PID: 7, Since: at(1), Seq: 1}},
		},
		{
			name: "undecodable payloads are counted and change nothing else",
			recs: numbered(
				applied(motd, event.ActionCreate, "sha256:aa", ""),
				raw(event.ResourceApplied, motd, `{"action":`),
				raw(event.HostStarted, "", `{"version":"v1","pid":"ten"}`),
				raw(event.ReconcileStarted, "", `[1,2]`),
				raw(event.DriftObserved, motd, `{"differs":"content"}`),
				raw(event.JournalCompacted, "", `{"through":-1}`),
				raw(event.VersionDelivered, "", `"v1"`),
			),
			want: State{Head: 7, Undecodable: 6, Owned: map[string]Owned{motd: {SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 1}}},
		},
		{
			name: "resource.applied that cannot be applied is undecodable",
			recs: numbered(
				applied(motd, "replaced", "sha256:aa", ""),
				applied("", event.ActionCreate, "sha256:aa", ""),
				applied("file:/\xff", event.ActionCreate, "sha256:aa", ""),
				raw(event.ResourceApplied, motd, ""),
			),
			want: State{Head: 4, Undecodable: 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Replay(State{}, tt.recs)
			if !Equal(got, tt.want) {
				t.Errorf("got a state that differs from the one wanted:\n%s", strings.Join(Diff(got, tt.want), "\n"))
			}
			one := State{}
			for _, r := range tt.recs {
				one = Fold(one, r)
			}
			if !Equal(one, got) {
				t.Errorf("Fold one at a time differs from Replay:\n%s", strings.Join(Diff(one, got), "\n"))
			}
		})
	}
}

func TestFoldEveryKnownKind(t *testing.T) {
	for _, k := range event.Kinds() {
		payload := `{}`
		if k == event.ResourceApplied {
			payload = `{"action":"created"}`
		}
		got := Fold(State{}, event.Record{Seq: 5, Time: t0, Kind: k, Resource: motd, Payload: []byte(payload)})
		if got.Head != 5 || got.Unknown != 0 || got.Undecodable != 0 {
			t.Errorf("%s: got head %d, unknown %d, undecodable %d; want 5, 0, 0", k, got.Head, got.Unknown, got.Undecodable)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	for _, b := range [][]byte{nil, {}} {
		s, err := Decode(b)
		if err != nil || !reflect.DeepEqual(s, State{}) {
			t.Errorf("Decode(%q): got %+v, %v; want the zero State, nil", b, s, err)
		}
	}
	for _, b := range []string{"{", "[]", `{"head":"one"}`, "null x"} {
		if _, err := Decode([]byte(b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Decode(%q): got error %v, want ErrCorrupt", b, err)
		}
	}

	cet := time.FixedZone("CET", 3600)
	s := State{
		Head:    42,
		Desired: &Desired{Revision: 3, Digest: "sha256:d", Resources: []event.DeclaredResource{{ID: motd, SpecDigest: "sha256:aa"}}, Seq: 2, Document: []byte("<doc>\x00")},
		Owned: map[string]Owned{
			motd:  {SpecDigest: "sha256:aa", LastOutcome: event.ActionUpdate, Seq: 40, Drifted: true},
			issue: {LastOutcome: event.ActionFailed, Seq: 41, Error: "disk & <full>"},
		},
		LastReconcile: &Reconcile{Seq: 39, Trigger: event.TriggerTimer, Revision: 3, Result: event.ResultConverged,
			Started: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC), Completed: time.Date(2025, 1, 2, 3, 4, 6, 7, time.UTC)},
		Running:     &Running{Version: "v9", PID: 1234, Since: time.Unix(1e9, 123456789).UTC(), Seq: 1},
		KnownGood:   "v8",
		Versions:    []string{"v8", "v9"},
		Link:        Link{Up: true, Broker: "nats://b", Since: time.Unix(2e9, 1).UTC()},
		Unknown:     1,
		Undecodable: 2,
		Pending:     &Pending{Seq: 42, Trigger: event.TriggerStart, Revision: 3, Plan: []event.Step{{Resource: motd, Action: event.ActionUpdate}}},
	}
	b, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("Decode(Encode(s)) differs from s:\n%s\ngot  %+v\nwant %+v", strings.Join(Diff(got, s), "\n"), got, s)
	}
	b2, _ := Encode(got)
	if !bytes.Equal(b, b2) {
		t.Errorf("re-encoding differs:\ngot  %s\nwant %s", b2, b)
	}

	// Representations that Encode does not tell apart decode the same.
	empty := State{Owned: map[string]Owned{}, Versions: []string{}, Desired: &Desired{Resources: []event.DeclaredResource{}, Document: []byte{}},
		Pending: &Pending{Plan: []event.Step{}}, Running: &Running{Since: t0.In(cet)}}
	b, _ = Encode(empty)
	got, _ = Decode(b)
	want := State{Desired: &Desired{}, Pending: &Pending{}, Running: &Running{Since: t0}}
	if !reflect.DeepEqual(got, want) || !Equal(empty, want) {
		t.Errorf("got %+v from %s, want %+v", got, b, want)
	}
}

func TestDiff(t *testing.T) {
	a := State{
		Head:    12,
		Owned:   map[string]Owned{motd: {SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 3}},
		Running: &Running{Version: "v1", Since: t0, Seq: 1},
		Pending: &Pending{Seq: 10, Plan: []event.Step{{Resource: motd, Action: event.ActionCreate}}},
	}
	b := State{
		Head: 13,
		Owned: map[string]Owned{
			motd:  {SpecDigest: "sha256:bb", LastOutcome: event.ActionCreate, Seq: 3},
			issue: {SpecDigest: "sha256:cc", LastOutcome: event.ActionCreate, Seq: 9},
		},
		Running:  &Running{Version: "v1", Since: t0.Add(time.Second), Seq: 1},
		Versions: []string{"v1"},
		Pending:  &Pending{Seq: 10},
	}
	want := []string{
		`head: 12 != 13`,
		`owned["file:/etc/issue"]: absent != {"spec_digest":"sha256:cc","last_outcome":"created","seq":9}`,
		`owned["file:/etc/motd"].spec_digest: "sha256:aa" != "sha256:bb"`,
		`running.since: 2025-03-01T12:00:00Z != 2025-03-01T12:00:01Z`,
		`versions: [] != ["v1"]`,
		`pending.plan[0]: {"resource":"file:/etc/motd","action":"created"} != absent`,
	}
	if got := Diff(a, b); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if Equal(a, b) {
		t.Errorf("Equal: got true, want false")
	}
	if got := Diff(a, a.Clone()); got != nil {
		t.Errorf("Diff of a state and its clone: got %q, want nil", got)
	}
	if got := Diff(State{}, State{Desired: &Desired{Revision: 1}}); !slices.Equal(got, []string{`desired: nil != {"revision":1,"seq":0}`}) {
		t.Errorf("got %q", got)
	}
}

func TestClone(t *testing.T) {
	recs := numbered(
		rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 1, Resources: []event.DeclaredResource{{ID: motd}}, Document: []byte("x")}),
		applied(motd, event.ActionCreate, "sha256:aa", ""),
		rec(event.VersionDelivered, "", event.VersionPayload{Version: "v1"}),
		rec(event.VersionDelivered, "", event.VersionPayload{Version: "v2"}),
		rec(event.ReconcileStarted, "", event.ReconcileStartedPayload{Plan: []event.Step{{Resource: motd}}}),
	)
	s := Replay(State{}, recs)
	before, _ := Encode(s)
	c := s.Clone()
	c.Desired.Resources[0].ID = "changed"
	c.Desired.Document[0] = 'y'
	c.Pending.Plan[0].Resource = "changed"
	c = Replay(c, []event.Record{
		{Seq: 6, Kind: event.ResourceApplied, Resource: motd, Payload: []byte(`{"action":"deleted"}`)},
		{Seq: 7, Kind: event.VersionDelivered, Payload: []byte(`{"version":"v1"}`)},
	})
	if after, _ := Encode(s); !bytes.Equal(before, after) {
		t.Errorf("changing a clone changed the original:\ngot  %s\nwant %s", after, before)
	}
	if len(c.Owned) != 0 || !slices.Equal(c.Versions, []string{"v2", "v1"}) {
		t.Errorf("clone: got owned %v, versions %q; want none, [v2 v1]", c.Owned, c.Versions)
	}
}

// Random journals for the properties.

var (
	genIDs      = []string{motd, issue, "directory:/srv", "unit:a b.service", "file:/tmp/<&>\u2028", "file:/\xff", ""}
	genDigests  = []string{"", "sha256:aa", "sha256:bb", "sha256:cc"}
	genVersions = []string{"", "v1", "v2", "v3", "v4"}
	genActions  = []event.Action{event.ActionCreate, event.ActionUpdate, event.ActionUnchanged, event.ActionDelete, event.ActionFailed, event.ActionReleased, "replaced"}
	genTriggers = []event.Trigger{event.TriggerPushed, event.TriggerStart, event.TriggerReconnect, event.TriggerTimer, event.TriggerManual}
	genGarbage  = []string{`{`, `[1]`, `"x"`, `{"action":5}`, `{"pid":"one","version":2}`, `{"plan":{}}`, `{"resources":"x"}`, `{"started":"yesterday"}`, `nul`,
		`{"version":"v1"} x`, `{} {}`, `{"action":"created"}]`, `  `, `5`, `null`}
	genKinds = append(event.Kinds(), "future.kind")
)

func genTime(t *rapid.T, label string) time.Time {
	tm := time.Unix(0, rapid.Int64Range(0, 4e18).Draw(t, label))
	if rapid.Bool().Draw(t, label+" zoned") {
		return tm.In(time.FixedZone("", 60*rapid.IntRange(-12*60, 14*60).Draw(t, label+" offset")))
	}
	return tm.UTC()
}

func genPayload(t *rapid.T, k event.Kind) any {
	str := func(label string, from []string) string { return rapid.SampledFrom(from).Draw(t, label) }
	small := func(label string) uint64 { return rapid.Uint64Range(0, 5).Draw(t, label) }
	switch k {
	case event.ResourceApplied:
		return event.ResourceAppliedPayload{
			Action:     rapid.SampledFrom(genActions).Draw(t, "action"),
			SpecDigest: str("digest", genDigests),
			Error:      rapid.String().Draw(t, "error"),
		}
	case event.DriftObserved:
		return event.DriftObservedPayload{Differs: []string{"content"}, Wanted: str("wanted", genDigests), Seen: str("seen", genDigests)}
	case event.ReconcileStarted:
		steps := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) event.Step {
			return event.Step{Resource: rapid.SampledFrom(genIDs[:5]).Draw(t, "id"), Action: rapid.SampledFrom(genActions).Draw(t, "action")}
		}), 0, 3).Draw(t, "plan")
		return event.ReconcileStartedPayload{Trigger: rapid.SampledFrom(genTriggers).Draw(t, "trigger"), Revision: small("revision"), Plan: steps}
	case event.ReconcileCompleted:
		p := event.ReconcileCompletedPayload{
			Trigger:   rapid.SampledFrom(genTriggers).Draw(t, "trigger"),
			Revision:  small("revision"),
			Result:    rapid.SampledFrom([]event.Result{event.ResultConverged, event.ResultFailed}).Draw(t, "result"),
			Changed:   rapid.IntRange(0, 3).Draw(t, "changed"),
			Unchanged: rapid.IntRange(0, 3).Draw(t, "unchanged"),
			Failed:    rapid.IntRange(0, 3).Draw(t, "failed"),
			Quiet:     rapid.Bool().Draw(t, "quiet"),
		}
		if rapid.Bool().Draw(t, "has started") {
			p.Started = genTime(t, "started")
		}
		return p
	case event.DeclarationReceived:
		res := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) event.DeclaredResource {
			return event.DeclaredResource{ID: rapid.SampledFrom(genIDs[:5]).Draw(t, "id"), SpecDigest: rapid.SampledFrom(genDigests).Draw(t, "digest")}
		}), 0, 3).Draw(t, "resources")
		return event.DeclarationReceivedPayload{
			Revision: small("revision"), Digest: str("digest", genDigests), Source: "push", Resources: res,
			Document: rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "document"),
		}
	case event.DeclarationRefused:
		return event.DeclarationRefusedPayload{Revision: small("revision"), Source: "push", Reason: rapid.String().Draw(t, "reason")}
	case event.HostStarted:
		return event.HostStartedPayload{Version: str("version", genVersions), PID: rapid.IntRange(0, 1<<22).Draw(t, "pid"),
			Build: rapid.SampledFrom([]string{"", "dev", "v1.2"}).Draw(t, "build")}
	case event.VersionDelivered, event.VersionConfirmed, event.VersionRetired:
		return event.VersionPayload{Version: str("version", genVersions)}
	case event.VersionStoodAside:
		return event.VersionStoodAsidePayload{Running: str("running", genVersions), Newer: str("newer", genVersions), Reason: "upgrade"}
	case event.VersionRolledBack:
		return event.VersionRolledBackPayload{From: str("from", genVersions), To: str("to", genVersions), Reason: "no confirm"}
	case event.LinkUp, event.LinkDown:
		return event.LinkPayload{Broker: str("broker", []string{"", "nats://a", "nats://b"}), Reason: str("reason", []string{"", "eof"})}
	case event.JournalCompacted:
		return event.JournalCompactedPayload{Through: small("through"), Dropped: small("dropped")}
	case event.HostFacts:
		return event.HostFactsPayload{Hostname: str("hostname", []string{"", "a", "b"}), Cores: rapid.IntRange(0, 4).Draw(t, "cores"),
			Addresses: rapid.SliceOfN(rapid.SampledFrom([]string{"10.0.0.1", "fd00::1"}), 0, 2).Draw(t, "addresses")}
	case event.PlanAnswered:
		return event.PlanAnsweredPayload{Revision: small("revision"), Digest: str("digest", genDigests), Create: int(small("create")), Refused: str("refused", []string{"", "older"})}
	case event.JournalScrubbed:
		return event.JournalScrubbedPayload{Head: small("head"), First: small("first"), Records: small("records"), Owned: int(small("owned")), Differences: int(small("differences"))}
	case event.RefreshOwed:
		return event.RefreshOwedPayload{Source: str("source", genIDs), Change: rapid.SampledFrom(genActions).Draw(t, "change"),
			Repair: rapid.Bool().Draw(t, "repair"), Refresh: str("refresh", []string{"restart", "reload", "run"}), Interrupted: small("interrupted")}
	case event.RefreshDone:
		return event.RefreshDonePayload{Did: str("did", []string{"", "restarted"}), Note: str("note", []string{"", "not running"}),
			Sources: rapid.SliceOfN(rapid.SampledFrom(genIDs), 0, 2).Draw(t, "sources")}
	case event.RefreshFailed:
		return event.RefreshFailedPayload{Error: str("error", []string{"", "job failed"})}
	case event.ResourceSkipped:
		return event.ResourceSkippedPayload{Requirement: str("requirement", genIDs), Reason: str("reason", []string{"", "failed"})}
	}
	return map[string]any{"future": rapid.Int().Draw(t, "future")}
}

// genRecords draws a journal: seqs from 1, kinds and payloads at random,
// some of them unknown or undecodable.
func genRecords(t *rapid.T) []event.Record {
	n := rapid.IntRange(0, 80).Draw(t, "n")
	recs := make([]event.Record, n)
	for i := range recs {
		k := rapid.SampledFrom(genKinds).Draw(t, "kind")
		var r event.Record
		switch rapid.IntRange(0, 15).Draw(t, "payload form") {
		case 0:
			r = raw(k, "", rapid.SampledFrom(genGarbage).Draw(t, "garbage"))
		case 1:
			r = raw(k, "", "")
		case 2:
			r = event.New(k, 0, "", genPayload(t, k))
			r.Payload = slices.Concat([]byte(" \n"), r.Payload, []byte("\t "))
		default:
			r = event.New(k, 0, "", genPayload(t, k))
		}
		r.Seq = uint64(i + 1)
		r.Time = genTime(t, "time")
		r.Cause = rapid.Uint64Range(0, uint64(i)).Draw(t, "cause")
		r.Resource = rapid.SampledFrom(genIDs).Draw(t, "resource")
		recs[i] = r
	}
	return recs
}

// genCuts draws sorted cut points splitting n records into batches, with 0
// and n at the ends; batches may be empty.
func genCuts(t *rapid.T, n int, label string) []int {
	cuts := rapid.SliceOfN(rapid.IntRange(0, n), 0, 8).Draw(t, label)
	cuts = append(cuts, 0, n)
	slices.Sort(cuts)
	return cuts
}

func mustEncode(t interface{ Fatalf(string, ...any) }, s State) []byte {
	b, err := Encode(s)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}

func mustDecode(t interface{ Fatalf(string, ...any) }, b []byte) State {
	s, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return s
}

// TestBatchesEqualWhole: the journal folds in batches, storing the encoded
// State between them; that must come to the same as folding all at once.
func TestBatchesEqualWhole(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := genRecords(t)
		want := Replay(State{}, recs)
		cuts := genCuts(t, len(recs), "cuts")
		var stored []byte
		for i := 1; i < len(cuts); i++ {
			s := mustDecode(t, stored)
			if rapid.Bool().Draw(t, "one at a time") {
				for _, r := range recs[cuts[i-1]:cuts[i]] {
					s = Fold(s, r)
				}
			} else {
				s = Replay(s, recs[cuts[i-1]:cuts[i]])
			}
			stored = mustEncode(t, s)
		}
		got := mustDecode(t, stored)
		if !Equal(got, want) {
			t.Fatalf("folding in batches %v differs from folding at once:\n%s", cuts, strings.Join(Diff(got, want), "\n"))
		}
		if w := mustEncode(t, want); !bytes.Equal(stored, w) {
			t.Fatalf("equal states encode differently:\ngot  %s\nwant %s", stored, w)
		}
		if len(recs) > 0 && got.Head != recs[len(recs)-1].Seq {
			t.Fatalf("got head %d, want %d", got.Head, recs[len(recs)-1].Seq)
		}
	})
}

// TestStreamDecode: a replay's Decoder makes of each payload what
// json.Unmarshal does, whatever came before it.
func TestStreamDecode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		valid := rapid.Custom(func(t *rapid.T) string {
			b, _ := json.Marshal(event.HostStartedPayload{Version: rapid.String().Draw(t, "version"), PID: rapid.Int().Draw(t, "pid")})
			return string(b)
		})
		payloads := rapid.SliceOf(rapid.OneOf(valid, rapid.SampledFrom(genGarbage), rapid.String(),
			rapid.Map(valid, func(s string) string { return "\n" + s + " " }),
			rapid.Just(`{"version":"a\u00e9\ud800","pid":1e2}`), rapid.Just(`{"pid":1.5}`))).Draw(t, "payloads")
		f := folder{stream: true}
		for i, raw := range payloads {
			var got, want event.HostStartedPayload
			gotOK := decode(&f, []byte(raw), &got)
			wantOK := len(raw) == 0 || json.Unmarshal([]byte(raw), &want) == nil
			if gotOK != wantOK || (wantOK && got != want) {
				t.Fatalf("payload %d %q: got %+v, %t; want %+v, %t", i, raw, got, gotOK, want, wantOK)
			}
		}
	})
}

// TestCompaction: a snapshot as of any record plus the records after it
// comes to the same as the whole journal.
func TestCompaction(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := genRecords(t)
		c := rapid.IntRange(0, len(recs)).Draw(t, "cut")
		snapshot := mustEncode(t, Replay(State{}, recs[:c]))
		got := Replay(mustDecode(t, snapshot), recs[c:])
		want := Replay(State{}, recs)
		if !Equal(got, want) {
			t.Fatalf("snapshot at %d plus the rest differs from the whole journal:\n%s", c, strings.Join(Diff(got, want), "\n"))
		}
	})
}

// TestCloneThenFold: folding a clone leaves the original as it was.
func TestCloneThenFold(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := genRecords(t)
		c := rapid.IntRange(0, len(recs)).Draw(t, "cut")
		s := Replay(State{}, recs[:c])
		before := mustEncode(t, s)
		Replay(s.Clone(), recs[c:])
		if after := mustEncode(t, s); !bytes.Equal(before, after) {
			t.Fatalf("folding a clone changed the original:\ngot  %s\nwant %s", after, before)
		}
	})
}

// memStore is a Store in memory, with a bbolt bucket's semantics.
type memStore map[string][]byte

func (m memStore) Get(k []byte) []byte { return m[string(k)] }
func (m memStore) Put(k, v []byte) error {
	m[string(k)] = bytes.Clone(v)
	return nil
}
func (m memStore) Delete(k []byte) error {
	delete(m, string(k))
	return nil
}
func (m memStore) ForEach(fn func(k, v []byte) error) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if err := fn([]byte(k), m[k]); err != nil {
			return err
		}
	}
	return nil
}

// storeOf is the store a fresh Stored leaves after folding recs at once.
func storeOf(t interface{ Fatalf(string, ...any) }, recs []event.Record) memStore {
	m := memStore{}
	if len(recs) == 0 {
		return m
	}
	if err := new(Stored).Fold(m, recs); err != nil {
		t.Fatalf("Fold: %v", err)
	}
	return m
}

// TestStored: folding in batches, into the store as left or into one
// rebuilt from an earlier point (a rolled-back transaction, another
// writer), leaves it holding exactly what folding everything at once would,
// and Load reads back Replay of the records so far. This is what makes the
// local fold (only touched keys read) equal the whole fold.
func TestStored(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := genRecords(t)
		cuts := genCuts(t, len(recs), "cuts")
		var p Stored
		st := memStore{}
		pos := 0 // records folded into st
		for i := 1; i < len(cuts); i++ {
			end := cuts[i]
			switch how := rapid.SampledFrom([]string{"own", "copy", "other"}).Draw(t, "store"); how {
			case "copy":
				st = maps.Clone(st)
			case "other":
				// The transactions since from were rolled back, or
				// another process wrote the projection.
				from := rapid.IntRange(0, pos).Draw(t, "from")
				st = storeOf(t, recs[:from])
				pos = from
			}
			if err := p.Fold(st, recs[pos:end]); err != nil {
				t.Fatalf("Fold(%d..%d): %v", pos, end, err)
			}
			if want := storeOf(t, recs[:end]); !maps.EqualFunc(st, want, bytes.Equal) {
				t.Fatalf("Fold(%d..%d): store holds\n%v\nwant\n%v", pos, end, st, want)
			}
			got, err := Load(st)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if want := Replay(State{}, recs[:end]); !Equal(got, want) {
				t.Fatalf("Load after Fold(%d..%d):\n%s", pos, end, strings.Join(Diff(got, want), "\n"))
			}
			d, err := LoadDesired(st)
			if err != nil {
				t.Fatalf("LoadDesired: %v", err)
			}
			if !Equal(State{Desired: d}, State{Desired: got.Desired}) {
				t.Fatalf("LoadDesired after Fold(%d..%d) = %+v, Load says %+v", pos, end, d, got.Desired)
			}
			pos = end
		}
	})
}

func TestStoredErrors(t *testing.T) {
	recs := numbered(
		applied(motd, event.ActionCreate, "sha256:aa", ""),
		applied(issue, event.ActionCreate, "sha256:bb", ""),
		applied(motd, event.ActionUpdate, "sha256:cc", ""),
	)
	var p Stored
	st := memStore{}
	if err := p.Fold(st, recs[:1]); err != nil {
		t.Fatal(err)
	}
	one := maps.Clone(st)
	for _, batch := range [][]event.Record{recs[:1], recs[2:], {recs[1], recs[1]}} {
		if err := p.Fold(st, batch); !errors.Is(err, ErrSequence) {
			t.Errorf("Fold of seqs %v after seq 1: got error %v, want ErrSequence", seqs(batch), err)
		}
		if !maps.EqualFunc(st, one, bytes.Equal) {
			t.Errorf("a refused Fold of seqs %v changed the store", seqs(batch))
		}
	}
	if err := p.Fold(st, recs[1:]); err != nil {
		t.Fatal(err)
	}
	if want := storeOf(t, recs); !maps.EqualFunc(st, want, bytes.Equal) {
		t.Errorf("after refusing, got %v, want %v", st, want)
	}
	// Fold reads the core and the keys its records touch; Load reads all.
	for _, bad := range []memStore{{"core": []byte("{")}, {"owned/" + motd: []byte("1")}} {
		if err := new(Stored).Fold(bad, recs[:1]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Fold into %v: got error %v, want ErrCorrupt", bad, err)
		}
	}
	for _, bad := range []memStore{{"core": []byte("{")}, {"desired": []byte("[")}, {"owned/x": []byte("1")}} {
		if _, err := Load(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Load of %v: got error %v, want ErrCorrupt", bad, err)
		}
	}
	if _, err := LoadDesired(memStore{"desired": []byte("[")}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("LoadDesired of a damaged desired key: got error %v, want ErrCorrupt", err)
	}
}

func seqs(recs []event.Record) []uint64 {
	var s []uint64
	for _, r := range recs {
		s = append(s, r.Seq)
	}
	return s
}

// TestPure holds the package to what its doc promises: no I/O, no clock, no
// internal imports but the vocabulary.
func TestPure(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"os", "net", "io/fs", "syscall", "unsafe", "testing", "log", "log/slog", "crypto/rand", "math/rand", "math/rand/v2"}
	const module = "github.com/mesh-host/mesh-host/"
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if slices.Contains(forbidden, path) || strings.HasPrefix(path, "os/") || strings.HasPrefix(path, "net/") ||
				(strings.HasPrefix(path, module) && path != module+"journal/event") {
				t.Errorf("%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" && (sel.Sel.Name == "Now" || sel.Sel.Name == "Since" || sel.Sel.Name == "Until") {
					t.Errorf("%s: reads the clock with time.%s", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}

// syntheticJournal is n records in reconciles of 100: a reconcile.started,
// outcomes over 1,000 resources (most unchanged), two drifts and a
// reconcile.completed. Payloads are shared between records, as only their
// bytes matter.
func syntheticJournal(n int) []event.Record {
	const resources = 1000
	ids := make([]string, resources)
	for i := range ids {
		ids[i] = fmt.Sprintf("file:/srv/data/%04d.conf", i)
	}
	actions := []event.Action{
		event.ActionUnchanged, event.ActionUnchanged, event.ActionUnchanged, event.ActionUnchanged,
		event.ActionUnchanged, event.ActionUnchanged, event.ActionUpdate, event.ActionCreate, event.ActionDelete, event.ActionFailed,
	}
	var outcomes [][]byte
	for _, a := range actions {
		for d := range 8 {
			p := event.ResourceAppliedPayload{Action: a, SpecDigest: fmt.Sprintf("sha256:%064x", d)}
			if a == event.ActionDelete {
				p.SpecDigest = ""
			}
			if a == event.ActionFailed {
				p.Error = "write /srv/data: no space left on device"
			}
			outcomes = append(outcomes, event.New(event.ResourceApplied, 0, "", p).Payload)
		}
	}
	start := event.New(event.ReconcileStarted, 0, "", event.ReconcileStartedPayload{
		Trigger: event.TriggerTimer, Revision: 42,
		Plan: []event.Step{{Resource: ids[1], Action: event.ActionUpdate}, {Resource: ids[2], Action: event.ActionCreate}},
	}).Payload
	done := event.New(event.ReconcileCompleted, 0, "", event.ReconcileCompletedPayload{
		Trigger: event.TriggerTimer, Revision: 42, Result: event.ResultConverged, Started: t0, Changed: 2, Unchanged: 94,
	}).Payload
	drift := event.New(event.DriftObserved, 0, "", event.DriftObservedPayload{Differs: []string{"content"}, Wanted: "sha256:aa", Seen: "sha256:bb"}).Payload

	recs := make([]event.Record, n)
	var started uint64
	for i := range recs {
		r := &recs[i]
		r.Seq = uint64(i + 1)
		r.Time = t0.Add(time.Duration(i) * time.Millisecond)
		switch i % 100 {
		case 0:
			r.Kind, r.Payload = event.ReconcileStarted, start
			started = r.Seq
		case 97, 98:
			r.Kind, r.Payload, r.Cause = event.DriftObserved, drift, 0
			r.Resource = ids[(i*7919)%resources]
		case 99:
			r.Kind, r.Payload, r.Cause = event.ReconcileCompleted, done, started
		default:
			r.Kind, r.Cause = event.ResourceApplied, started
			r.Resource = ids[(i*7919)%resources]
			r.Payload = outcomes[(i*31)%len(outcomes)]
		}
	}
	return recs
}

func BenchmarkReplay(b *testing.B) {
	const n = 1_000_000
	recs := syntheticJournal(n)
	b.ReportAllocs()
	var s State
	for b.Loop() {
		s = Replay(State{}, recs)
	}
	if s.Head != n || s.Undecodable != 0 || s.LastReconcile == nil {
		b.Fatalf("got head %d, undecodable %d, last reconcile %v; want %d, 0, set", s.Head, s.Undecodable, s.LastReconcile, n)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// TestRefreshSourcesBounded: a thousand changes owe one refresh of
// MaxRefreshSources sources and a count of the rest.
func TestRefreshSourcesBounded(t *testing.T) {
	var recs []event.Record
	for i := range 1000 {
		recs = append(recs, rec(event.RefreshOwed, "unit:web.service", event.RefreshOwedPayload{Source: fmt.Sprintf("file:/etc/f%d", i), Change: event.ActionUpdate}))
	}
	s := Replay(State{}, numbered(recs...))
	o := s.Refreshes["unit:web.service"]
	if len(o.Sources) != MaxRefreshSources || o.More != 1000-MaxRefreshSources || o.Sources[0].Resource != "file:/etc/f0" {
		t.Errorf("got %d sources (first %s) and %d more, want %d from file:/etc/f0 and %d more",
			len(o.Sources), o.Sources[0].Resource, o.More, MaxRefreshSources, 1000-MaxRefreshSources)
	}
}
