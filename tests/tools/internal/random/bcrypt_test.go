package random

import (
	"strings"
	"testing"
)

func TestPiWords(t *testing.T) {
	c := initialBlowfish()
	// The first and last words of Blowfish's P-array and S-boxes.
	for _, tc := range []struct {
		name      string
		got, want uint32
	}{
		{"P[0]", c.p[0], 0x243f6a88}, {"P[1]", c.p[1], 0x85a308d3}, {"P[17]", c.p[17], 0x8979fb1b},
		{"S0[0]", c.s[0][0], 0xd1310ba6}, {"S0[1]", c.s[0][1], 0x98dfb5ac}, {"S3[255]", c.s[3][255], 0x3ac372e6},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %#08x, want %#08x", tc.name, tc.got, tc.want)
		}
	}
}

func TestBcryptKnownHashes(t *testing.T) {
	// Hashes from golang.org/x/crypto/bcrypt's tests (what the real provider uses).
	for _, tc := range []struct{ password, hash string }{
		{"allmine", "$2a$10$XajjQvNhvvRt5GSeFk1xFeyqRrsxkhBkUiQeg0dt.wU1qD4aFDcga"},
		{"012345678901234567890123456789012345678901234567890123456", "$2a$10$XajjQvNhvvRt5GSeFk1xFe5l47dONXg781AmZtd869sO8zfsHuw7C"},
		{"passw0rd", "$2a$10$LK9XRuhNxHHCvjX3tdkRKei1QiCDUKrJRhZv7WWZPuQGRUM92rOUa"},
	} {
		if !BcryptMatches(tc.hash, tc.password) {
			salt, _ := bcryptEncoding.DecodeString(tc.hash[7:29])
			t.Errorf("bcrypt(%q) = %s, want %s", tc.password, bcryptRaw([]byte(tc.password), 10, salt), tc.hash[29:])
		}
		if BcryptMatches(tc.hash, tc.password+"x") {
			t.Errorf("%q matches %s", tc.password+"x", tc.hash)
		}
	}
}

func TestBcrypt(t *testing.T) {
	pw := strings.Repeat("abc", 30) // 90 bytes: hashed on the first 72
	h, err := Bcrypt(pw)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 60 || !strings.HasPrefix(h, "$2a$10$") {
		t.Errorf("hash %q", h)
	}
	if !BcryptMatches(h, pw) || !BcryptMatches(h, pw[:72]) || BcryptMatches(h, pw[:71]) {
		t.Errorf("hash %q does not verify as expected", h)
	}
	if _, err := BcryptWithSalt([]byte("x"), 10, []byte("short")); err == nil {
		t.Error("short salt accepted")
	}
}
