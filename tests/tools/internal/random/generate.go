package random

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"math/big"
	mathrand "math/rand"
	"strings"
)

// Word lists for pet names (the real provider uses github.com/dustinkirkland/golang-petname's
// much longer lists). All lower case.
var (
	petAdverbs = []string{
		"ably", "actually", "amazingly", "briefly", "calmly", "carefully", "closely", "deeply",
		"eagerly", "early", "easily", "equally", "fairly", "finally", "firmly", "freely", "gently",
		"gladly", "greatly", "happily", "highly", "honestly", "hugely", "jointly", "kindly",
		"largely", "lately", "loudly", "mainly", "merely", "mostly", "neatly", "nicely", "openly",
		"partly", "politely", "quickly", "quietly", "rapidly", "really", "seemingly", "simply",
		"slowly", "smoothly", "solely", "strongly", "surely", "truly", "vastly", "wholly",
	}
	petAdjectives = []string{
		"able", "active", "adapted", "amazed", "amused", "brave", "bright", "busy", "calm", "capable",
		"clean", "clever", "cool", "crisp", "daring", "driven", "eager", "enabled", "epic", "exact",
		"fair", "famous", "fast", "fine", "fit", "fluent", "fond", "free", "fresh", "gentle", "glad",
		"golden", "grand", "happy", "helpful", "holy", "honest", "humble", "ideal", "intent", "just",
		"keen", "kind", "known", "large", "legal", "live", "loved", "loyal", "lucky", "magical",
		"main", "merry", "modern", "moving", "neat", "noble", "open", "optimal", "patient", "polite",
		"precious", "proper", "quick", "rare", "ready", "renewed", "right", "robust", "safe", "secure",
		"sharp", "smart", "social", "solid", "still", "sunny", "super", "sweet", "tender", "tidy",
		"topical", "true", "trusted", "united", "up", "valid", "vital", "warm", "wise", "witty",
	}
	petNames = []string{
		"alpaca", "ant", "badger", "bat", "bear", "beaver", "bee", "bison", "boar", "bobcat",
		"buffalo", "camel", "cat", "cheetah", "chicken", "cicada", "cobra", "cod", "colt", "condor",
		"cougar", "cow", "coyote", "crab", "crane", "cricket", "crow", "deer", "dingo", "dodo",
		"dog", "dolphin", "dove", "duck", "eagle", "eel", "elk", "emu", "falcon", "ferret", "finch",
		"fish", "flamingo", "fox", "frog", "gazelle", "gecko", "gibbon", "giraffe", "goat", "goose",
		"gopher", "gorilla", "grouse", "gull", "hamster", "hare", "hawk", "hen", "heron", "horse",
		"hound", "hyena", "ibex", "iguana", "impala", "jackal", "jaguar", "jay", "kid", "kingfish",
		"kitten", "koala", "lamb", "lark", "lemur", "leopard", "lion", "lizard", "llama", "lobster",
		"lynx", "macaw", "magpie", "mako", "mallard", "mammoth", "marlin", "marmot", "mink", "mole",
		"mongoose", "moose", "mouse", "mule", "newt", "ocelot", "octopus", "orca", "oriole", "osprey",
		"otter", "owl", "ox", "panda", "panther", "parrot", "pelican", "penguin", "pheasant", "pig",
		"pigeon", "pony", "poodle", "porpoise", "puma", "pup", "python", "quail", "rabbit", "raccoon",
		"ram", "raven", "reindeer", "robin", "salmon", "seal", "shark", "sheep", "shrew", "skunk",
		"sloth", "snail", "snake", "sparrow", "squid", "stork", "swan", "tapir", "tiger", "toad",
		"trout", "turkey", "turtle", "unicorn", "viper", "vulture", "walrus", "wasp", "weasel",
		"whale", "wolf", "wombat", "wren", "yak", "zebra",
	}
)

// randIndex is a uniform random index below n (crypto/rand).
func randIndex(n int) int {
	i, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return int(i.Int64())
}

func pick(words []string) string { return words[randIndex(len(words))] }

// PetName generates a pet name of length words like the real provider: one word is an animal,
// two are adjective-animal, more are adverbs then adjective-animal; the prefix, when set, comes
// first, joined with the separator.
func PetName(length int, separator, prefix string) string {
	var words []string
	if prefix != "" {
		words = append(words, prefix)
	}
	if length > 1 {
		for i := 0; i < length-2; i++ {
			words = append(words, pick(petAdverbs))
		}
		words = append(words, pick(petAdjectives))
	}
	words = append(words, pick(petNames))
	// The words are lower case; the prefix is kept as given (as by the real provider).
	return strings.Join(words, separator)
}

// StringParams are RandomString's and RandomPassword's generation parameters.
type StringParams struct {
	Length                                     int
	Upper, Lower, Numeric, Special             bool
	MinUpper, MinLower, MinNumeric, MinSpecial int
	OverrideSpecial                            string
}

const (
	numChars            = "0123456789"
	lowerChars          = "abcdefghijklmnopqrstuvwxyz"
	upperChars          = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	DefaultSpecialChars = "!@#$%&*()-_=+[]{}<>:?"
)

// ErrEmptyCharset is what CreateString fails with when every character class is disabled.
var ErrEmptyCharset = errors.New("the character set specified is empty")

// CreateString generates a string like the real provider: the minimum counts of each class first
// (from that class even when it is disabled, as the real one does), the rest from the enabled
// classes, then shuffled. Characters are runes (overrideSpecial may hold any).
func CreateString(p StringParams) (string, error) {
	special := DefaultSpecialChars
	if p.OverrideSpecial != "" {
		special = p.OverrideSpecial
	}
	chars := ""
	if p.Upper {
		chars += upperChars
	}
	if p.Lower {
		chars += lowerChars
	}
	if p.Numeric {
		chars += numChars
	}
	if p.Special {
		chars += special
	}
	if chars == "" {
		return "", ErrEmptyCharset
	}
	result := make([]rune, 0, p.Length)
	for _, m := range []struct {
		set string
		n   int
	}{{numChars, p.MinNumeric}, {lowerChars, p.MinLower}, {upperChars, p.MinUpper}, {special, p.MinSpecial}} {
		result = appendRandom(result, m.set, m.n)
	}
	result = appendRandom(result, chars, p.Length-len(result))
	for i := len(result) - 1; i > 0; i-- {
		j := randIndex(i + 1)
		result[i], result[j] = result[j], result[i]
	}
	return string(result), nil
}

func appendRandom(out []rune, set string, n int) []rune {
	runes := []rune(set)
	for i := 0; i < n; i++ {
		out = append(out, runes[randIndex(len(runes))])
	}
	return out
}

// RandomID are RandomId's outputs for byteLength random bytes: the resource id (unprefixed
// URL-safe base64, as the real provider) and the prefixed encodings.
type RandomID struct {
	ID, B64Std, B64URL, Dec, Hex string
}

// NewRandomID generates a RandomId's values.
func NewRandomID(byteLength int, prefix string) RandomID {
	b := make([]byte, byteLength)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return EncodeRandomID(b, prefix)
}

// EncodeRandomID derives a RandomId's values from its bytes.
func EncodeRandomID(b []byte, prefix string) RandomID {
	id := base64.RawURLEncoding.EncodeToString(b)
	return RandomID{
		ID:     id,
		B64URL: prefix + id,
		B64Std: prefix + base64.StdEncoding.EncodeToString(b),
		Hex:    prefix + hex.EncodeToString(b),
		Dec:    prefix + new(big.Int).SetBytes(b).String(),
	}
}

// RandomInteger picks an integer in [min, max]. With a seed it is the real provider's value for
// that seed (math/rand seeded with the CRC-64/ISO of the seed); without one it uses crypto/rand.
func RandomInteger(min, max int64, seed string) int64 {
	n := max - min + 1
	if seed != "" {
		r := mathrand.New(mathrand.NewSource(int64(crc64.Checksum([]byte(seed), crc64.MakeTable(crc64.ISO)))))
		return int64(r.Intn(int(n))) + min
	}
	i, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return i.Int64() + min
}

// NewUUID generates a random (version 4) UUID in lower case.
func NewUUID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
