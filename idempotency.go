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
	// LeaseUntil is, while the key is in progress, until when its request
	// holds it: past it, a key that applied nothing (Status 0) may be
	// claimed anew, and one applied (IdempotencyApplied) reads as applied
	// without an answer.
	LeaseUntil time.Time
	// Status is the answer's HTTP status; 0 while the request is in
	// progress and has applied nothing, IdempotencyApplied once its write
	// is committed and until its answer is stored. Body is the answer's
	// body.
	Status int
	Body   []byte
	// Busy is set by ClaimIdempotencyKey on a key whose request is
	// writing under it at this moment: it is in progress, whatever its
	// lease says.
	Busy bool
}

// IdempotencyApplied is the Status of a key whose request's write is
// committed, its answer not yet stored.
const IdempotencyApplied = -1

// Answered reports whether k holds its request's answer (a Status of 0 or
// IdempotencyApplied is a key still in progress).
func (k *IdempotencyKey) Answered() bool { return k.Status > 0 }

// idempotencyClaimKey carries an IdempotencyKey in a context.
type idempotencyClaimKey struct{}

// WithIdempotencyClaim returns ctx carrying k, the key its request holds.
// A store's write under that ctx commits only while the request still
// holds the key, and marks it IdempotencyApplied in the same transaction:
// so a key in progress (Status 0) whose lease has passed has certainly
// applied nothing, and may be claimed by a request sent again with it,
// which fences the first out.
func WithIdempotencyClaim(ctx context.Context, k *IdempotencyKey) context.Context {
	return context.WithValue(ctx, idempotencyClaimKey{}, k)
}

// IdempotencyClaim returns the key ctx carries, or nil.
func IdempotencyClaim(ctx context.Context) *IdempotencyKey {
	k, _ := ctx.Value(idempotencyClaimKey{}).(*IdempotencyKey)
	return k
}

// RenewedLease is when the lease of k, renewed now, ends: as long after
// now as k's lease ran after k was claimed. A store's write under k
// renews it (see WithIdempotencyClaim).
func RenewedLease(k *IdempotencyKey) time.Time {
	return time.Now().Add(k.LeaseUntil.Sub(k.CreatedAt))
}

// ErrIdempotencyClaimLost is the refusal of a write whose request no
// longer holds its Idempotency-Key.
func ErrIdempotencyClaimLost() error {
	return Errorf(CodeConflict, "This request held its Idempotency-Key for over a minute without being applied, and a request sent again with the key has taken it over: this one was not applied; that one is, or will be.")
}

// IdempotencyStore keeps idempotency keys in the database, so that every
// node agrees on them.
type IdempotencyStore interface {
	// ClaimIdempotencyKey records k in progress (Status 0) under its user,
	// mode and key and returns nil, true, unless a key is there already:
	// then it returns that one and false. A key made before notBefore, or
	// one in progress (Status 0) whose LeaseUntil is not after
	// k.CreatedAt, is replaced. A key whose request is writing under it
	// at this moment may be returned at once, marked Busy, rather than
	// waited for (with no RequestID when it is being claimed anew).
	ClaimIdempotencyKey(ctx context.Context, k *IdempotencyKey, notBefore time.Time) (*IdempotencyKey, bool, error)
	// FinishIdempotencyKey stores k's Status and Body, if the key is still
	// in progress (Status 0 or IdempotencyApplied) under k's Claim;
	// otherwise it does nothing.
	FinishIdempotencyKey(ctx context.Context, k *IdempotencyKey) error
	// ReleaseIdempotencyKey removes the key and returns true, if it is in
	// progress under k's Claim and applied nothing (Status 0): k's request
	// failed and changed nothing, so the key may be used again.
	// Otherwise it does nothing and returns false.
	ReleaseIdempotencyKey(ctx context.Context, k *IdempotencyKey) (bool, error)
	// EndIdempotencyLease sets the key's LeaseUntil to at, if it is in
	// progress under k's Claim: its request ended without an answer to
	// keep (it failed after applying its write), so that the key reads
	// at once as applied and unanswered.
	EndIdempotencyLease(ctx context.Context, k *IdempotencyKey, at time.Time) error
	// DeleteIdempotencyKeys removes the keys made before before and
	// returns how many it removed.
	DeleteIdempotencyKeys(ctx context.Context, before time.Time) (int64, error)
}
