package coinpulse

import (
	"context"
	"time"
)

// IdempotencyKey is what the store keeps of a request sent with an
// Idempotency-Key header (a POST or a PATCH): which request the key was
// first used with and, once that request succeeded, its answer, which a
// request sent again with the key gets instead of being applied twice.
// A key belongs to a user in one mode (live or sandbox).
type IdempotencyKey struct {
	UserID int64
	Mode   Mode
	Key    string
	// Request names the request the key was first used with, as messages
	// show it: "POST /v1/portfolio/transactions".
	Request string
	// Digest is the hex SHA-256 of that request's method, path, query and
	// body: a key sent again with another request is refused.
	Digest string
	// RequestID is that request's X-Request-Id.
	RequestID string
	// Claim is a random token of the request that holds the key: only it
	// may finish or release the key.
	Claim     string
	CreatedAt time.Time
	// LeaseUntil is, while Status is 0, until when the request is allowed
	// to be in progress: past it, the request was interrupted (its node
	// stopped) and may or may not have been applied.
	LeaseUntil time.Time
	// Status is the answer's HTTP status, 0 while the request is in
	// progress; Body is the answer's body.
	Status int
	Body   []byte
}

// IdempotencyStore keeps idempotency keys in the database, so that every
// node agrees on them.
type IdempotencyStore interface {
	// ClaimIdempotencyKey records k in progress (Status 0) under its user,
	// mode and key and returns nil, true, unless a key made at or after
	// notBefore is there already: then it returns that one and false. A
	// key made before notBefore is replaced.
	ClaimIdempotencyKey(ctx context.Context, k *IdempotencyKey, notBefore time.Time) (*IdempotencyKey, bool, error)
	// FinishIdempotencyKey stores k's Status and Body, if the key is still
	// in progress under k's Claim; otherwise it does nothing.
	FinishIdempotencyKey(ctx context.Context, k *IdempotencyKey) error
	// ReleaseIdempotencyKey removes the key, if it is still in progress
	// under k's Claim (k's request failed and changed nothing, so the key
	// may be used again); otherwise it does nothing.
	ReleaseIdempotencyKey(ctx context.Context, k *IdempotencyKey) error
	// DeleteIdempotencyKeys removes the keys made before before and
	// returns how many it removed.
	DeleteIdempotencyKeys(ctx context.Context, before time.Time) (int64, error)
}
