package account_test

import (
	"context"
	"slices"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
)

// journaled is a driver whose every Apply the host journals, as the
// reconciler does: what it created and the ids it reported, which the
// driver's Options answer from.
type journaled struct {
	drivers.Driver
	h *host
}

func (j journaled) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	return j.h.tryApply(ctx, j.Driver, spec)
}

func (j journaled) Numbers(spec drivers.Spec) []drivers.Number {
	return j.Driver.(drivers.Numbered).Numbers(spec)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, set := range []string{"debian", "odd"} {
		t.Run("user/"+set, func(t *testing.T) {
			driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
				r, h := newRoot(t, set), newHost()
				return driverstest.Fixture{
					Driver: journaled{account.NewUsers(r, h.options()), h},
					Specs: []drivers.Spec{
						&drivers.UserSpec{Name: "app", Groups: []string{"staff"}, Comment: "the app", Password: secret(otherHash)},
						&drivers.UserSpec{Name: "svc", System: true},
						&drivers.UserSpec{Name: "web", UID: intp(2000), Group: "www-data", Home: "/srv/web", Shell: "/bin/bash"},
					},
					Changed: func(spec drivers.Spec) drivers.Spec {
						s := *spec.(*drivers.UserSpec)
						s.Groups = append(slices.Clone(s.Groups), "users")
						s.Shell, s.Comment = "/bin/dash", "changed"
						return &s
					},
					Snapshot: func(t *testing.T) string { return driverstest.Tree(t, r.Dir()) },
				}
			})
		})
		t.Run("group/"+set, func(t *testing.T) {
			driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
				r, h := newRoot(t, set), newHost()
				return driverstest.Fixture{
					Driver: journaled{account.NewGroups(r, h.options()), h},
					Specs: []drivers.Spec{
						&drivers.GroupSpec{Name: "deploy"},
						&drivers.GroupSpec{Name: "metrics", GID: intp(4321)},
						&drivers.GroupSpec{Name: "sysgrp", System: true},
					},
					Changed: func(spec drivers.Spec) drivers.Spec {
						s := *spec.(*drivers.GroupSpec)
						s.GID, s.ChangeID = intp(4242), true
						return &s
					},
					Snapshot: func(t *testing.T) string { return driverstest.Tree(t, r.Dir()) },
				}
			})
		})
	}
}
