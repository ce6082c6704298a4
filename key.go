package coinpulse

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"
	"unicode"
	"unicode/utf8"
)

// API keys look like sk_live_<32 base62 random><6 base62 checksum> (or
// sk_test_…): 32 base62 characters carry 190 bits of randomness, and the
// checksum (CRC-32 of everything before it) lets a typo be rejected without
// a database look-up.
const (
	keyRandomLen   = 32
	keyChecksumLen = 6
	// KeyLen is the length of every well-formed key.
	KeyLen = len("sk_live_") + keyRandomLen + keyChecksumLen
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func keyPrefix(m Mode) string { return "sk_" + string(m) + "_" }

// GenerateKey returns a new random key of mode m.
func GenerateKey(m Mode) (string, error) {
	if !m.Valid() {
		return "", Errorf(CodeValidation, "unknown key mode %q", m)
	}
	var b strings.Builder
	b.Grow(KeyLen)
	b.WriteString(keyPrefix(m))
	buf := make([]byte, keyRandomLen*2)
	n := 0
	for n < keyRandomLen {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, c := range buf {
			// Rejection sampling keeps every character uniform.
			if c < 248 && n < keyRandomLen {
				b.WriteByte(base62[c%62])
				n++
			}
		}
	}
	body := b.String()
	return body + checksum(body), nil
}

func checksum(body string) string {
	c := checksumBytes(body)
	return string(c[:])
}

func checksumBytes(body string) [keyChecksumLen]byte {
	var buf [KeyLen]byte // keeps the conversion off the heap
	sum := crc32.ChecksumIEEE(buf[:copy(buf[:], body)])
	var out [keyChecksumLen]byte
	for i := keyChecksumLen - 1; i >= 0; i-- {
		out[i] = base62[sum%62]
		sum /= 62
	}
	return out
}

// ParseKey checks the form and checksum of key and returns its mode. Any
// defect is an INVALID_API_KEY error that does not echo the key.
func ParseKey(key string) (Mode, error) {
	if len(key) != KeyLen {
		return "", Errorf(CodeInvalidAPIKey, "The API key is malformed: keys are %d characters starting with sk_live_ or sk_test_.", KeyLen)
	}
	var m Mode
	switch {
	case strings.HasPrefix(key, "sk_live_"):
		m = ModeLive
	case strings.HasPrefix(key, "sk_test_"):
		m = ModeTest
	default:
		return "", Errorf(CodeInvalidAPIKey, "The API key is malformed: keys start with sk_live_ or sk_test_.")
	}
	for i := len("sk_live_"); i < len(key); i++ {
		if strings.IndexByte(base62, key[i]) < 0 {
			return "", Errorf(CodeInvalidAPIKey, "The API key is malformed: it contains a character that no key has.")
		}
	}
	body := key[:len(key)-keyChecksumLen]
	if c := checksumBytes(body); string(c[:]) != key[len(key)-keyChecksumLen:] {
		return "", Errorf(CodeInvalidAPIKey, "The API key is malformed: its checksum does not match (a typo?).")
	}
	return m, nil
}

// HashKey returns the hex SHA-256 of key, the form keys are stored in.
// Keys carry 190 bits of randomness, so a fast hash is enough.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// NewAPIKey generates a key of mode m and returns its plaintext (to show
// once) and a record ready for AccountStore.CreateKey.
func NewAPIKey(userID int64, name string, m Mode, perms Permissions) (string, *APIKey, error) {
	key, err := GenerateKey(m)
	if err != nil {
		return "", nil, err
	}
	return key, &APIKey{
		UserID:      userID,
		Name:        name,
		Mode:        m,
		Hash:        HashKey(key),
		Prefix:      key[:len("sk_live_")+4],
		Last4:       key[len(key)-4:],
		Permissions: perms,
	}, nil
}

// MaxKeyName is the longest key name, in characters.
const MaxKeyName = 64

// CheckKeyName returns name without surrounding spaces when it is a valid
// key name, 1 to MaxKeyName printable characters, else a VALIDATION_ERROR
// on field "name". The dashboard and the CLI both hold names to it.
func CheckKeyName(name string) (string, error) {
	// Control characters are refused wherever they are: the trim would
	// take CR, VT, FF and NEL off the ends.
	if strings.IndexFunc(name, func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
		return "", ValidationError("name", "A key name cannot contain control characters.")
	}
	name = strings.TrimSpace(name)
	switch {
	case name == "":
		return "", ValidationError("name", "Give the key a name, such as the app that will use it.")
	case !utf8.ValidString(name):
		return "", ValidationError("name", "A key name must be UTF-8 text.")
	case utf8.RuneCountInString(name) > MaxKeyName:
		return "", ValidationError("name", fmt.Sprintf("A key name is at most %d characters.", MaxKeyName))
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		// A no-break space, a right-to-left mark, a private-use or an
		// unassigned character: not control characters, but not seen.
		return "", ValidationError("name", "A key name can contain only visible characters and ASCII spaces.")
	}
	return name, nil
}
