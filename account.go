package coinpulse

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tier is a subscription level; what it allows comes from its Plan.
type Tier string

// The shipped tiers.
const (
	TierFree       Tier = "free"
	TierPremium    Tier = "premium"
	TierPro        Tier = "pro"
	TierEnterprise Tier = "enterprise"
	TierBusiness   Tier = "business"
)

// Tiers lists the tiers in ascending order.
var Tiers = []Tier{TierFree, TierPremium, TierPro, TierEnterprise, TierBusiness}

// ParseTier returns the tier named s, or a VALIDATION_ERROR naming the
// allowed values.
func ParseTier(s string) (Tier, error) {
	for _, t := range Tiers {
		if string(t) == s {
			return t, nil
		}
	}
	return "", ValidationError("tier", "must be one of free, premium, pro, enterprise, business")
}

// User is an account holder. A paid tier may carry an expiry; past it every
// call fails with EXPIRED_SUBSCRIPTION.
type User struct {
	ID            int64
	Email         string
	PasswordHash  string // argon2id encoded, empty when no password was set
	Tier          Tier
	TierExpiresAt *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// EmailKey is the form e-mail addresses are compared in, so that one
// address is one account however it is typed: Unicode NFC (a precomposed
// "ä" and "a" with a combining diaeresis are one letter), then lower case
// by Unicode's rules (both engines' lower() fold ASCII only, or by the
// database's locale). Both stores keep it beside the address as typed,
// unique; the dashboard's log-in throttle counts failures by it.
//
// An address that is not UTF-8 (only one stored before sign-up checked
// it can be) has its ASCII letters lowered and every other byte kept:
// strings.ToLower would make each invalid byte U+FFFD, so that
// "\xc4rger@…" and "\xd6rger@…" (Latin-1 text) would be one address.
func EmailKey(email string) string {
	for i := 0; i < len(email); i++ {
		if email[i] >= utf8.RuneSelf {
			if !utf8.ValidString(email) {
				return asciiLower(email)
			}
			return norm.NFC.String(strings.ToLower(norm.NFC.String(email)))
		}
	}
	return strings.ToLower(email) // ASCII: NFC already, and cheap
}

// asciiLower lowers the ASCII letters of s and keeps every other byte.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// SubscriptionExpired reports whether u holds a paid tier whose expiry is
// in the past at now. The free tier never expires.
func (u *User) SubscriptionExpired(now time.Time) bool {
	return u.Tier != TierFree && u.TierExpiresAt != nil && !now.Before(*u.TierExpiresAt)
}

// Permission is what a key may do: read or write.
type Permission string

// The two permissions.
const (
	PermRead  Permission = "read"
	PermWrite Permission = "write"
)

// Permissions is a set of permissions.
type Permissions struct {
	Read, Write bool
}

// Has reports whether p includes perm.
func (p Permissions) Has(perm Permission) bool {
	switch perm {
	case PermRead:
		return p.Read
	case PermWrite:
		return p.Write
	}
	return false
}

// String renders p as a comma-separated list ("read,write").
func (p Permissions) String() string {
	var parts []string
	if p.Read {
		parts = append(parts, string(PermRead))
	}
	if p.Write {
		parts = append(parts, string(PermWrite))
	}
	return strings.Join(parts, ",")
}

// List returns p as a slice of names.
func (p Permissions) List() []string {
	if s := p.String(); s != "" {
		return strings.Split(s, ",")
	}
	return []string{}
}

// ParsePermissions parses a comma-separated list of read and write; an
// empty or unknown entry is a VALIDATION_ERROR.
func ParsePermissions(s string) (Permissions, error) {
	var p Permissions
	for _, part := range strings.Split(s, ",") {
		switch strings.TrimSpace(part) {
		case "read":
			p.Read = true
		case "write":
			p.Write = true
		default:
			return Permissions{}, ValidationError("permissions", "must be a comma-separated list of read and write")
		}
	}
	return p, nil
}

// MaxActiveKeys is how many keys an account may hold that are neither
// revoked nor expired, live and test counted together.
const MaxActiveKeys = 5

// APIKey is a key's stored record. The plaintext key is never stored: only
// its SHA-256 (Hash, hex) and, for listings, Prefix and Last4.
type APIKey struct {
	ID          int64
	UserID      int64
	Name        string
	Mode        Mode
	Hash        string
	Prefix      string // e.g. "sk_live_Ab3x"
	Last4       string
	Permissions Permissions
	ExpiresAt   *time.Time
	CreatedAt   time.Time
	LastUsedAt  *time.Time
	RevokedAt   *time.Time
}

// Active reports whether k is usable at now: not revoked and not expired.
func (k *APIKey) Active(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// Display renders the key for listings: prefix, an ellipsis, the last four.
func (k *APIKey) Display() string { return k.Prefix + "…" + k.Last4 }

// AccountStore persists users and their keys.
type AccountStore interface {
	// CreateUser inserts u, setting its ID and times. An e-mail already in
	// use (compared by EmailKey) is a CONFLICT error.
	CreateUser(ctx context.Context, u *User) error
	// UserByID returns the user, or RESOURCE_NOT_FOUND.
	UserByID(ctx context.Context, id int64) (*User, error)
	// UserByEmail returns the user with that e-mail (compared by
	// EmailKey), or RESOURCE_NOT_FOUND.
	UserByEmail(ctx context.Context, email string) (*User, error)
	// HasUsers reports whether the store holds any user.
	HasUsers(ctx context.Context) (bool, error)
	// SetUserTier changes a user's tier and expiry (nil: none) and bumps the
	// auth epoch. Unknown user: RESOURCE_NOT_FOUND.
	SetUserTier(ctx context.Context, userID int64, tier Tier, expiresAt *time.Time) error
	// CreateKey inserts k, setting its ID and CreatedAt. When the user
	// already holds MaxActiveKeys active keys at k.CreatedAt (or now, if
	// zero) it fails with KEY_LIMIT_REACHED and inserts nothing; the check
	// and the insert are atomic.
	CreateKey(ctx context.Context, k *APIKey) error
	// KeyByHash returns the key whose hash is hash (revoked ones too), or
	// RESOURCE_NOT_FOUND.
	KeyByHash(ctx context.Context, hash string) (*APIKey, error)
	// KeysByUser lists a user's keys, revoked ones included, oldest first.
	KeysByUser(ctx context.Context, userID int64) ([]*APIKey, error)
	// RevokeKey marks the user's key revoked at now and bumps the auth
	// epoch. A key of another user, or none, is RESOURCE_NOT_FOUND;
	// revoking a revoked key is a no-op.
	RevokeKey(ctx context.Context, userID, keyID int64, now time.Time) error
	// TouchKeys records last-used times; it never moves a time backwards.
	TouchKeys(ctx context.Context, lastUsed map[int64]time.Time) error
	// AuthEpoch returns a counter that changes whenever a change could make
	// a cached authentication wrong (revocation, tier change). Nodes poll it
	// to drop their key caches.
	AuthEpoch(ctx context.Context) (int64, error)
}

// The errors account stores return, worded for subscribers; both engines
// use them so that their answers agree.

// ErrUserNotFound is RESOURCE_NOT_FOUND for a user.
func ErrUserNotFound() error { return Errorf(CodeNotFound, "The user was not found.") }

// ErrKeyNotFound is RESOURCE_NOT_FOUND for an API key.
func ErrKeyNotFound() error { return Errorf(CodeNotFound, "The API key was not found.") }

// ErrEmailTaken is the CONFLICT of creating a user whose e-mail is in use.
func ErrEmailTaken(cause error) error {
	return &Error{Code: CodeConflict, Message: "An account with this e-mail address already exists.", Err: cause}
}

// ErrKeyExists is the CONFLICT of storing a key hash twice.
func ErrKeyExists(cause error) error {
	return &Error{Code: CodeConflict, Message: "An API key with this hash already exists.", Err: cause}
}

// ErrKeyLimit is KEY_LIMIT_REACHED: the account holds MaxActiveKeys.
func ErrKeyLimit() error {
	return Errorf(CodeKeyLimitReached, "An account holds at most %d active keys; revoke one first.", MaxActiveKeys)
}
