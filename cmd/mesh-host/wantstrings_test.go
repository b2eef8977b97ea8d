package main

import (
	"slices"
	"testing"
)

// wantStrings checks a list of names, such as upgradetest.VersionNames
// gives.
func wantStrings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}
