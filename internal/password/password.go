// Package password hashes account passwords with argon2id in the PHC
// string format ($argon2id$v=19$m=…,t=…,p=…$salt$hash).
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"

	"golang.org/x/crypto/argon2"
)

// Parameters follow the OWASP recommendation for argon2id (19 MiB, t=2).
const (
	memory  = 19 * 1024
	time    = 2
	threads = 1
	keyLen  = 32
	saltLen = 16
)

// slots bound the hashes computed at once to the CPUs: each takes 19 MiB,
// and sign-ups and log-ins sent in parallel by anyone would otherwise take
// as many times that (an audit: 40 at once took the process from 408 MB
// to 1 GB). The others wait their turn, which the CPUs impose anyway.
var slots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))

// hashing and peak count the hashes being computed, for tests.
var hashing, peak atomic.Int32

// idKey is argon2.IDKey in a slot.
func idKey(pw, salt []byte, t, m uint32, p uint8, n uint32) []byte {
	slots <- struct{}{}
	defer func() { <-slots }()
	now := hashing.Add(1)
	defer hashing.Add(-1)
	for old := peak.Load(); now > old && !peak.CompareAndSwap(old, now); old = peak.Load() {
	}
	return argon2.IDKey(pw, salt, t, m, p, n)
}

// ErrMismatch is returned by Verify when the password is wrong.
var ErrMismatch = errors.New("password does not match")

// Hash returns the encoded argon2id hash of pw.
func Hash(pw string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := idKey([]byte(pw), salt, time, memory, threads, keyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, memory, time, threads, b64.EncodeToString(salt), b64.EncodeToString(sum)), nil
}

// Verify checks pw against an encoded hash: nil on a match, ErrMismatch on
// a wrong password, another error for a malformed hash.
func Verify(pw, encoded string) error {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return errors.New("password: not an argon2id hash")
	}
	var v, m, t, p int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return errors.New("password: unsupported argon2 version")
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m <= 0 || t <= 0 || p <= 0 || p > 255 {
		return errors.New("password: malformed parameters")
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return errors.New("password: malformed salt")
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return errors.New("password: malformed hash")
	}
	got := idKey([]byte(pw), salt, uint32(t), uint32(m), uint8(p), uint32(len(want)))
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return ErrMismatch
	}
	return nil
}
