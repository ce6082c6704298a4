package password

import (
	"errors"
	"testing"
)

func TestHashVerify(t *testing.T) {
	h, err := Hash("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify("correct horse", h); err != nil {
		t.Errorf("Verify(right password) = %v, want nil", err)
	}
	if err := Verify("wrong horse", h); !errors.Is(err, ErrMismatch) {
		t.Errorf("Verify(wrong password) = %v, want ErrMismatch", err)
	}
	h2, _ := Hash("correct horse")
	if h == h2 {
		t.Error("two hashes of one password are equal: the salt is not random")
	}
	for _, bad := range []string{"", "$argon2id$", "$argon2i$v=19$m=1,t=1,p=1$AA$AA", "$argon2id$v=19$m=x$AA$AA", "$argon2id$v=19$m=8,t=1,p=1$!!$AA"} {
		if err := Verify("x", bad); err == nil || errors.Is(err, ErrMismatch) {
			t.Errorf("Verify(%q) = %v, want a malformed-hash error", bad, err)
		}
	}
}
