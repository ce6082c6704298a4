package password

import (
	"errors"
	"sync"
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

// Hashes computed in parallel take turns, at most one a CPU: each takes
// 19 MiB (an audit: 40 sign-ups at once took a gigabyte).
func TestHashesTakeTurns(t *testing.T) {
	peak.Store(0)
	enc, err := Hash("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			if i%2 == 0 {
				if _, err := Hash("battery staple"); err != nil {
					t.Error(err)
				}
			} else if Verify("wrong", enc) != ErrMismatch {
				t.Error("a wrong password matched")
			}
		})
	}
	wg.Wait()
	if got, most := peak.Load(), int32(cap(slots)); got > most || got < 1 {
		t.Errorf("%d hashes at once, want 1 to %d", got, most)
	}
}
