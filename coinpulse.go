// Package coinpulse holds the domain of the Coinpulse API: accounts, keys,
// plans, coins and their market figures, price history, and the interfaces
// that the storage and feed adapters implement. It imports no adapter.
package coinpulse

import (
	"context"
	"time"
)

// Mode separates a subscriber's live data from their sandbox data. Every row
// a subscriber owns carries one.
type Mode string

// The two modes: keys starting sk_live_ act in live mode, sk_test_ in sandbox.
const (
	ModeLive Mode = "live"
	ModeTest Mode = "test"
)

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool { return m == ModeLive || m == ModeTest }

// Store is everything the service persists. Implementations live in
// internal/sqlite and internal/postgres and pass internal/storetest.
type Store interface {
	AccountStore
	PortfolioStore
	HistoryStore
	KVStore
	UsageStore
	AlertStore
	SessionStore
	IdempotencyStore
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}

// KVStore keeps small opaque blobs under string keys: the market engine's
// warm-start state, the simulation's anchor time.
type KVStore interface {
	// GetKV returns the value under key, or an error of kind
	// RESOURCE_NOT_FOUND when there is none.
	GetKV(ctx context.Context, key string) ([]byte, error)
	// PutKV stores value under key, replacing any previous value.
	PutKV(ctx context.Context, key string, value []byte) error
	// SwapKV stores value under key if the value there is old, or, with a
	// nil old, if there is none; swapped says whether it did. Of the
	// nodes that swap from one value at once, one does.
	SwapKV(ctx context.Context, key string, old, value []byte) (swapped bool, err error)
}

// Clock tells the time; tests inject their own.
type Clock func() time.Time
