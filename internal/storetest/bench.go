package storetest

import (
	"fmt"
	"testing"
	"time"

	"coinpulse"
)

// BenchAddAdmitted measures what a busy node's meter adds to each batch:
// one AddAdmitted of a count for each of 1,000 users whose months have
// rows already (the steady state), over a table of 2,000 rows (two months
// of each user) and a month of metered days. s must be empty.
func BenchAddAdmitted(b *testing.B, s coinpulse.Store) {
	ctx := b.Context()
	month := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	var changes, old []coinpulse.Admitted
	var calls []coinpulse.Call
	for i := range 1000 {
		u := &coinpulse.User{Email: fmt.Sprintf("bench%d@example.com", i), Tier: coinpulse.TierPremium}
		if err := s.CreateUser(ctx, u); err != nil {
			b.Fatal(err)
		}
		changes = append(changes, coinpulse.Admitted{UserID: u.ID, Month: month, Calls: 3})
		old = append(old, coinpulse.Admitted{UserID: u.ID, Month: month.AddDate(0, -1, 0), Calls: 100})
		for d := range 20 {
			calls = append(calls, coinpulse.Call{UserID: u.ID, KeyID: u.ID, Mode: coinpulse.ModeLive, Time: month.AddDate(0, 0, d),
				Method: "GET", Route: "/api/v1/markets/global", Status: 200, Counted: true})
		}
	}
	if err := s.RecordCalls(ctx, calls); err != nil {
		b.Fatal(err)
	}
	if err := s.AddAdmitted(ctx, old); err != nil {
		b.Fatal(err)
	}
	if err := s.AddAdmitted(ctx, changes); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.AddAdmitted(ctx, changes); err != nil {
			b.Fatal(err)
		}
	}
}
