package random

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/big"
	"sync"
)

// bcrypt as golang.org/x/crypto/bcrypt computes it for the real provider's `bcryptHash`
// (`$2a$`, cost 10). It is written out here because golang.org/x/crypto is only an indirect
// requirement of this module: importing it would change go.mod. Blowfish's initial P-array and
// S-boxes are the hexadecimal digits of pi's fractional part, computed once with math/big
// instead of tabulated. The unit tests check it against x/crypto's published hashes.

// BcryptCost is the cost of bcryptHash (bcrypt.DefaultCost, as the real provider uses).
const BcryptCost = 10

const bcryptAlphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

var bcryptEncoding = base64.NewEncoding(bcryptAlphabet).WithPadding(base64.NoPadding)

var blowfishInitial struct {
	once sync.Once
	c    blowfish
}

type blowfish struct {
	p [18]uint32
	s [4][256]uint32
}

// piWords returns the first n 32-bit words of pi's fractional part (pi = 3.243F6A88 85A308D3 ...),
// from Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) in fixed point with guard bits.
func piWords(n int) []uint32 {
	bits := uint(32 * n)
	const guard = 64
	one := new(big.Int).Lsh(big.NewInt(1), bits+guard)
	atanInv := func(x int64) *big.Int {
		sum, t := new(big.Int), new(big.Int)
		term := new(big.Int).Quo(one, big.NewInt(x))
		x2 := big.NewInt(x * x)
		for k := int64(0); term.Sign() != 0; k++ {
			t.Quo(term, big.NewInt(2*k+1))
			if k%2 == 0 {
				sum.Add(sum, t)
			} else {
				sum.Sub(sum, t)
			}
			term.Quo(term, x2)
		}
		return sum
	}
	pi := new(big.Int).Mul(atanInv(5), big.NewInt(16))
	pi.Sub(pi, new(big.Int).Mul(atanInv(239), big.NewInt(4)))
	pi.Rsh(pi, guard)
	pi.Sub(pi, new(big.Int).Lsh(big.NewInt(3), bits)) // the fractional part, times 2^bits
	buf := pi.FillBytes(make([]byte, 4*n))
	words := make([]uint32, n)
	for i := range words {
		words[i] = binary.BigEndian.Uint32(buf[4*i:])
	}
	return words
}

func initialBlowfish() blowfish {
	blowfishInitial.once.Do(func() {
		w := piWords(18 + 4*256)
		copy(blowfishInitial.c.p[:], w[:18])
		for i := range blowfishInitial.c.s {
			copy(blowfishInitial.c.s[i][:], w[18+256*i:18+256*(i+1)])
		}
	})
	return blowfishInitial.c
}

func (c *blowfish) f(x uint32) uint32 {
	return ((c.s[0][x>>24] + c.s[1][x>>16&0xff]) ^ c.s[2][x>>8&0xff]) + c.s[3][x&0xff]
}

func (c *blowfish) encrypt(l, r uint32) (uint32, uint32) {
	for i := 0; i < 16; i += 2 {
		l ^= c.p[i]
		r ^= c.f(l)
		r ^= c.p[i+1]
		l ^= c.f(r)
	}
	l ^= c.p[16]
	r ^= c.p[17]
	return r, l
}

// nextWord reads the next big-endian 32-bit word of b cyclically from *pos.
func nextWord(b []byte, pos *int) uint32 {
	var w uint32
	for k := 0; k < 4; k++ {
		w = w<<8 | uint32(b[*pos])
		*pos++
		if *pos >= len(b) {
			*pos = 0
		}
	}
	return w
}

// expandKey is Blowfish's key schedule; with a salt (bcrypt's EksBlowfish setup) the salt's
// words are mixed into every block encrypted.
func (c *blowfish) expandKey(key, salt []byte) {
	j := 0
	for i := range c.p {
		c.p[i] ^= nextWord(key, &j)
	}
	var l, r uint32
	k := 0
	next := func() {
		if salt != nil {
			l ^= nextWord(salt, &k)
			r ^= nextWord(salt, &k)
		}
		l, r = c.encrypt(l, r)
	}
	for i := 0; i < len(c.p); i += 2 {
		next()
		c.p[i], c.p[i+1] = l, r
	}
	for s := range c.s {
		for i := 0; i < 256; i += 2 {
			next()
			c.s[s][i], c.s[s][i+1] = l, r
		}
	}
}

// bcryptRaw computes the 31-character hash part of a bcrypt string for a 16-byte salt.
func bcryptRaw(password []byte, cost int, salt []byte) string {
	if len(password) > 72 {
		password = password[:72]
	}
	key := append(append(make([]byte, 0, len(password)+1), password...), 0) // C bcrypt uses the NUL too
	c := initialBlowfish()
	c.expandKey(key, salt)
	for i := 0; i < 1<<cost; i++ {
		c.expandKey(key, nil)
		c.expandKey(salt, nil)
	}
	data := []byte("OrpheanBeholderScryDoubt")
	for i := 0; i < len(data); i += 8 {
		l, r := binary.BigEndian.Uint32(data[i:]), binary.BigEndian.Uint32(data[i+4:])
		for j := 0; j < 64; j++ {
			l, r = c.encrypt(l, r)
		}
		binary.BigEndian.PutUint32(data[i:], l)
		binary.BigEndian.PutUint32(data[i+4:], r)
	}
	return bcryptEncoding.EncodeToString(data[:23]) // only 23 of the 24 bytes, as C bcrypt
}

// BcryptWithSalt returns the `$2a$` bcrypt string of password with the given cost and 16-byte
// salt. Passwords longer than 72 bytes are hashed on their first 72 bytes (as the real provider).
func BcryptWithSalt(password []byte, cost int, salt []byte) (string, error) {
	if len(salt) != 16 {
		return "", fmt.Errorf("bcrypt salt must be 16 bytes, not %d", len(salt))
	}
	if cost < 4 || cost > 31 {
		return "", fmt.Errorf("bcrypt cost must be between 4 and 31, not %d", cost)
	}
	return fmt.Sprintf("$2a$%02d$%s%s", cost, bcryptEncoding.EncodeToString(salt), bcryptRaw(password, cost, salt)), nil
}

// Bcrypt returns the bcrypt string of password with a random salt and BcryptCost.
func Bcrypt(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	return BcryptWithSalt([]byte(password), BcryptCost, salt)
}

// BcryptMatches reports whether hash (a `$2a$`/`$2b$`/`$2y$` bcrypt string) is password's.
func BcryptMatches(hash, password string) bool {
	if len(hash) != 60 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$' || hash[6] != '$' {
		return false
	}
	var cost int
	if _, err := fmt.Sscanf(hash[4:6], "%02d", &cost); err != nil || cost < 4 || cost > 31 {
		return false
	}
	salt, err := bcryptEncoding.DecodeString(hash[7:29])
	if err != nil || len(salt) != 16 {
		return false
	}
	return bcryptRaw([]byte(password), cost, salt) == hash[29:]
}
