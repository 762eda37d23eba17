package random

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Version is the plugin version reported to the engine and in the schema.
const Version = "4.18.0"

// The resource types, with the real provider's canonical tokens (`random:index/randomPet:RandomPet`),
// so URNs are the ones the real provider gives. Pulumi YAML resolves `random:index:RandomPet` and
// `random:RandomPet` to them through the schema.
const (
	PetType      = "random:index/randomPet:RandomPet"
	StringType   = "random:index/randomString:RandomString"
	PasswordType = "random:index/randomPassword:RandomPassword"
	IDType       = "random:index/randomId:RandomId"
	IntegerType  = "random:index/randomInteger:RandomInteger"
	UUIDType     = "random:index/randomUuid:RandomUuid"
)

// Types lists the resource types served.
var Types = []string{PetType, StringType, PasswordType, IDType, IntegerType, UUIDType}

// CanonicalType maps a resource type token (canonical, `random:index:RandomPet` or
// `random:RandomPet`) to its canonical token; ok is false for a type this provider does not serve.
func CanonicalType(t string) (string, bool) {
	parts := strings.Split(t, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "random" {
		return "", false
	}
	name := parts[len(parts)-1]
	for _, c := range Types {
		if strings.HasSuffix(c, ":"+name) {
			if len(parts) == 2 || parts[1] == "index" || c == t {
				return c, true
			}
		}
	}
	return "", false
}

type propSpec struct {
	Name        string
	Type        string // integer, string, boolean, keepers
	Description string
	Input       bool // an input (else a computed output only)
	Required    bool // a required input
	Secret      bool
	Deprecated  string
}

const keepersDescription = "Arbitrary map of values that, when changed, will trigger recreation of resource."

var keepers = propSpec{Name: "keepers", Type: "keepers", Input: true, Description: keepersDescription}

// stringProps are the properties shared by RandomString and RandomPassword.
var stringProps = []propSpec{
	keepers,
	{Name: "length", Type: "integer", Input: true, Required: true, Description: "The length of the string desired. " +
		"The minimum value for length is 1 and, length must also be >= (`minUpper` + `minLower` + `minNumeric` + `minSpecial`)."},
	{Name: "special", Type: "boolean", Input: true, Description: "Include special characters in the result. " +
		"These are `!@#$%&*()-_=+[]{}<>:?`. Default value is `true`."},
	{Name: "upper", Type: "boolean", Input: true, Description: "Include uppercase alphabet characters in the result. Default value is `true`."},
	{Name: "lower", Type: "boolean", Input: true, Description: "Include lowercase alphabet characters in the result. Default value is `true`."},
	{Name: "number", Type: "boolean", Input: true, Description: "Include numeric characters in the result. Default value is `true`.",
		Deprecated: "**NOTE**: This is deprecated, use `numeric` instead."},
	{Name: "numeric", Type: "boolean", Input: true, Description: "Include numeric characters in the result. Default value is `true`. " +
		"If `numeric`, `upper`, `lower`, and `special` are all configured, at least one of them must be set to `true`."},
	{Name: "minNumeric", Type: "integer", Input: true, Description: "Minimum number of numeric characters in the result. Default value is `0`."},
	{Name: "minUpper", Type: "integer", Input: true, Description: "Minimum number of uppercase alphabet characters in the result. Default value is `0`."},
	{Name: "minLower", Type: "integer", Input: true, Description: "Minimum number of lowercase alphabet characters in the result. Default value is `0`."},
	{Name: "minSpecial", Type: "integer", Input: true, Description: "Minimum number of special characters in the result. Default value is `0`."},
	{Name: "overrideSpecial", Type: "string", Input: true, Description: "Supply your own list of special characters to use for " +
		"string generation. This overrides the default character list in the special argument. The `special` argument must " +
		"still be set to true for any overwritten characters to be used in generation."},
}

// resourceSpec describes one resource type: its properties (inputs and computed outputs).
type resourceSpec struct {
	Token       string
	Description string
	Props       []propSpec
}

var resourceSpecs = []resourceSpec{
	{Token: PetType, Description: "Generates random pet names that are intended to be used as unique identifiers for other resources.",
		Props: []propSpec{
			keepers,
			{Name: "length", Type: "integer", Input: true, Description: "The length (in words) of the pet name. Defaults to 2"},
			{Name: "prefix", Type: "string", Input: true, Description: "A string to prefix the name with."},
			{Name: "separator", Type: "string", Input: true, Description: "The character to separate words in the pet name. Defaults to \"-\""},
		}},
	{Token: StringType, Description: "Generates a random permutation of alphanumeric characters and optionally special characters.",
		Props: append(append([]propSpec{}, stringProps...),
			propSpec{Name: "result", Type: "string", Description: "The generated random string."})},
	{Token: PasswordType, Description: "Identical to RandomString with the exception that the result is treated as sensitive.",
		Props: append(append([]propSpec{}, stringProps...),
			propSpec{Name: "result", Type: "string", Secret: true, Description: "The generated random string."},
			propSpec{Name: "bcryptHash", Type: "string", Secret: true, Description: "A bcrypt hash of the generated random string. " +
				"**NOTE**: If the generated random string is greater than 72 bytes in length, `bcryptHash` will contain a hash of the first 72 bytes."})},
	{Token: IDType, Description: "Generates random numbers that are intended to be used as unique identifiers for other resources.",
		Props: []propSpec{
			keepers,
			{Name: "byteLength", Type: "integer", Input: true, Required: true, Description: "The number of random bytes to produce. " +
				"The minimum value is 1, which produces eight bits of randomness."},
			{Name: "prefix", Type: "string", Input: true, Description: "Arbitrary string to prefix the output value with. " +
				"This string is supplied as-is, meaning it is not guaranteed to be URL-safe or base64 encoded."},
			{Name: "b64Std", Type: "string", Description: "The generated id presented in base64 without additional transformations."},
			{Name: "b64Url", Type: "string", Description: "The generated id presented in base64, using the URL-friendly character set: " +
				"case-sensitive letters, digits and the characters `_` and `-`."},
			{Name: "dec", Type: "string", Description: "The generated id presented in non-padded decimal digits."},
			{Name: "hex", Type: "string", Description: "The generated id presented in padded hexadecimal digits. " +
				"This result will always be twice as long as the requested byte length."},
		}},
	{Token: IntegerType, Description: "Generates a random number within a range (min and max inclusive).",
		Props: []propSpec{
			keepers,
			{Name: "min", Type: "integer", Input: true, Required: true, Description: "The minimum inclusive value of the range."},
			{Name: "max", Type: "integer", Input: true, Required: true, Description: "The maximum inclusive value of the range."},
			{Name: "seed", Type: "string", Input: true, Description: "A custom seed to always produce the same value."},
			{Name: "result", Type: "integer", Description: "The random integer result."},
		}},
	{Token: UUIDType, Description: "Generates a random version 4 UUID string.",
		Props: []propSpec{
			keepers,
			{Name: "result", Type: "string", Description: "The generated uuid presented in string format."},
		}},
}

// optionalInState are the outputs absent from the state when not given.
var optionalInState = map[string]bool{"keepers": true, "prefix": true, "overrideSpecial": true, "seed": true}

func specFor(token string) resourceSpec {
	for _, r := range resourceSpecs {
		if r.Token == token {
			return r
		}
	}
	panic(fmt.Sprintf("no spec for %s", token))
}

// inputNames are the input properties of a resource type.
func inputNames(token string) []string {
	var out []string
	for _, p := range specFor(token).Props {
		if p.Input {
			out = append(out, p.Name)
		}
	}
	return out
}

// computedNames are the computed-only output properties of a resource type.
func computedNames(token string) []string {
	var out []string
	for _, p := range specFor(token).Props {
		if !p.Input {
			out = append(out, p.Name)
		}
	}
	return out
}

// Schema returns the package schema (JSON): the real provider's tokens, property names, types,
// required lists and secret flags for the resource types served.
func Schema() []byte {
	jsonType := func(p propSpec) map[string]any {
		var t map[string]any
		if p.Type == "keepers" {
			t = map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}}
		} else {
			t = map[string]any{"type": p.Type}
		}
		t["description"] = p.Description
		if p.Secret {
			t["secret"] = true
		}
		if p.Deprecated != "" {
			t["deprecationMessage"] = p.Deprecated
		}
		return t
	}
	resources := map[string]any{}
	for _, r := range resourceSpecs {
		inputs, props := map[string]any{}, map[string]any{}
		var requiredInputs, required []string
		for _, p := range r.Props {
			props[p.Name] = jsonType(p)
			if p.Input {
				inputs[p.Name] = jsonType(p)
				if p.Required {
					requiredInputs = append(requiredInputs, p.Name)
				}
			}
			// As in the real schema, every output but keepers and the optional strings is always
			// present in the state.
			if !optionalInState[p.Name] {
				required = append(required, p.Name)
			}
		}
		res := map[string]any{
			"description":     r.Description,
			"inputProperties": inputs,
			"properties":      props,
			"required":        required,
		}
		if len(requiredInputs) > 0 {
			res["requiredInputs"] = requiredInputs
		}
		resources[r.Token] = res
	}
	spec := map[string]any{
		"name":        "random",
		"displayName": "random (test stand-in)",
		"version":     Version,
		"description": "TEST STAND-IN for the Pulumi random provider (pulumi-random), for the pulumi-operator-rs tests. Never shipped.",
		"meta":        map[string]any{"moduleFormat": "(.*)(?:/[^/]*)"},
		"config":      map[string]any{},
		"provider": map[string]any{
			"description": "The provider type for the random package.",
		},
		"resources": resources,
	}
	b, err := json.Marshal(spec)
	if err != nil {
		panic(err)
	}
	return b
}
