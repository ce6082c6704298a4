package storetest

import (
	"slices"
	"testing"

	"coinpulse"
)

// V11Emails are accounts a version-11 database could hold, by id from 1
// (whether PostgreSQL's lower() let all of them in depends on its
// locale). Each engine's migration test rolls a database back to version
// 11, inserts them, opens it again (migration 12 runs) and hands the
// email_key column, by id, to CheckEmailKeys.
var V11Emails = []string{"\u212Aate@example.com", "Kate@Example.com", "Ärger@example.com", "ärger@example.com",
	"Zoe\u0308@example.com", "\u0130nfo@example.com", "INFO@example.com"}

// CheckEmailKeys checks the keys migration 12 gave V11Emails: the first
// of two accounts with one key keeps it, whichever was ASCII, the later
// one is "#ID key"; each address reaches its account then, and a sign-up
// as one of them is a CONFLICT.
func CheckEmailKeys(t *testing.T, s coinpulse.Store, keys []string) {
	t.Helper()
	want := []string{"kate@example.com", "#2 kate@example.com", "ärger@example.com", "#4 ärger@example.com",
		"zoë@example.com", "info@example.com", "#7 info@example.com"}
	if !slices.Equal(keys, want) {
		t.Errorf("email keys %q, want %q", keys, want)
	}
	for email, id := range map[string]int64{"KATE@example.com": 1, "#2 kate@example.com": 2, "ÄRGER@example.com": 3,
		"#4 Ärger@example.com": 4, "zoë@EXAMPLE.com": 5, "info@example.com": 6, "#7 INFO@example.com": 7} {
		if u, err := s.UserByEmail(t.Context(), email); err != nil || u.ID != id {
			t.Errorf("UserByEmail(%s): %+v, %v; want user %d", email, u, err, id)
		}
	}
	if err := s.CreateUser(t.Context(), &coinpulse.User{Email: "ZOË@example.com"}); coinpulse.ErrorCode(err) != coinpulse.CodeConflict {
		t.Errorf("a sign-up as ZOË after the migration: %v, want CONFLICT", err)
	}
}
