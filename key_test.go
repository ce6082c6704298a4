package coinpulse

import (
	"strings"
	"testing"
)

func TestGenerateParseKey(t *testing.T) {
	for _, m := range []Mode{ModeLive, ModeTest} {
		key, err := GenerateKey(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(key) != KeyLen || !strings.HasPrefix(key, "sk_"+string(m)+"_") {
			t.Fatalf("GenerateKey(%s) = %q, want %d chars with prefix sk_%s_", m, key, KeyLen, m)
		}
		got, err := ParseKey(key)
		if err != nil || got != m {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q, nil", key, got, err, m)
		}
		// Every single-character typo in the random part is caught by the
		// checksum (CRC-32 detects all single-symbol changes).
		for i := len("sk_live_"); i < len(key); i++ {
			b := []byte(key)
			b[i] = base62[(strings.IndexByte(base62, b[i])+1)%62]
			if _, err := ParseKey(string(b)); ErrorCode(err) != CodeInvalidAPIKey {
				t.Fatalf("typo at %d not caught: ParseKey = %v", i, err)
			}
		}
	}
	a, _ := GenerateKey(ModeLive)
	b, _ := GenerateKey(ModeLive)
	if a == b {
		t.Error("two generated keys are equal")
	}
}

func TestParseKeyRejects(t *testing.T) {
	good, _ := GenerateKey(ModeLive)
	for name, key := range map[string]string{
		"empty":        "",
		"short":        good[:KeyLen-1],
		"long":         good + "x",
		"other prefix": "pk_live_" + good[8:],
		"bad char":     good[:10] + "!" + good[11:],
		"swapped mode": "sk_test_" + good[8:],
	} {
		if _, err := ParseKey(key); ErrorCode(err) != CodeInvalidAPIKey {
			t.Errorf("%s: ParseKey(%q) = %v, want INVALID_API_KEY", name, key, err)
		} else if strings.Contains(err.Error(), good[8:20]) {
			t.Errorf("%s: the error echoes the key: %v", name, err)
		}
	}
}

func TestNewAPIKeyRecord(t *testing.T) {
	key, rec, err := NewAPIKey(7, "ci", ModeTest, Permissions{Read: true})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Hash != HashKey(key) || rec.Prefix != key[:12] || rec.Last4 != key[len(key)-4:] || rec.UserID != 7 || rec.Mode != ModeTest {
		t.Errorf("record %+v does not match key %q", rec, key)
	}
	if strings.Contains(rec.Hash, key[8:]) {
		t.Error("the hash contains the key")
	}
}

func FuzzParseKey(f *testing.F) {
	good, _ := GenerateKey(ModeLive)
	for _, s := range []string{good, "", "sk_live_", "sk_test_0000000000000000000000000000000000000", good[:45] + "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseKey(s)
		if err != nil {
			if ErrorCode(err) != CodeInvalidAPIKey {
				t.Fatalf("ParseKey(%q) error kind %s", s, ErrorCode(err))
			}
			return
		}
		if !m.Valid() || len(s) != KeyLen || checksum(s[:len(s)-keyChecksumLen]) != s[len(s)-keyChecksumLen:] {
			t.Fatalf("ParseKey accepted %q as %q", s, m)
		}
	})
}

func TestParsePermissionsAndTier(t *testing.T) {
	if p, err := ParsePermissions("read, write"); err != nil || !p.Read || !p.Write || p.String() != "read,write" {
		t.Errorf("ParsePermissions(read, write) = %+v, %v", p, err)
	}
	for _, bad := range []string{"", "admin", "read,,write"} {
		if _, err := ParsePermissions(bad); ErrorCode(err) != CodeValidation {
			t.Errorf("ParsePermissions(%q) = %v, want VALIDATION_ERROR", bad, err)
		}
	}
	if _, err := ParseTier("gold"); ErrorCode(err) != CodeValidation {
		t.Errorf("ParseTier(gold) = %v", err)
	}
}

// Key names: 1 to 64 visible characters and spaces, each refusal saying
// what is wrong with the name.
func TestCheckKeyName(t *testing.T) {
	for name, want := range map[string]string{
		"  my app  ":            "my app",
		"ünïcödé ✓":             "ünïcödé ✓",
		strings.Repeat("é", 64): strings.Repeat("é", 64),
		"":                      "Give the key a name",
		"   ":                   "Give the key a name",
		strings.Repeat("é", 65): "at most 64 characters",
		"a\xffb":                "must be UTF-8 text",
		"a\tb":                  "cannot contain control characters",
		"a\u0085b":              "cannot contain control characters",
		"a\u00a0b":              "only visible characters and ASCII spaces",
		"a\u200fb":              "only visible characters and ASCII spaces",
		"a\ue000b":              "only visible characters and ASCII spaces",
		"a\uffffb":              "only visible characters and ASCII spaces",
	} {
		got, err := CheckKeyName(name)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, want) {
			t.Errorf("CheckKeyName(%q) = %q, want %q", name, got, want)
		}
	}
}
