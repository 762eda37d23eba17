// Package random implements the `random` TEST STAND-IN provider plugin (pulumi-resource-random):
// the resource types of the Pulumi random provider (github.com/pulumi/pulumi-random, a bridge of
// hashicorp/terraform-provider-random), whose Go module the module proxy refuses, so that Pulumi
// YAML programs written for the real provider run unchanged in the tests. For tests only; never
// shipped.
//
// It serves RandomPet, RandomString, RandomPassword, RandomId, RandomInteger and RandomUuid with
// the real provider's tokens, property names, defaults, ids and secret outputs. Every input
// change (keepers included) replaces the resource; Read hands the state back unchanged (there is
// nothing outside the state), or builds it from the id on import as the real provider does. Values come from crypto/rand, except that a RandomInteger with a
// `seed` gives the real provider's value for that seed. Not served: RandomBytes, RandomShuffle,
// RandomUuid4, RandomUuid7 and the provider's `terraformConfig` method.
package random

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
)

// Provider is the gRPC ResourceProvider.
type Provider struct {
	provsupport.Base
}

// New makes the provider (the host client is not needed).
func New(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
	return &Provider{Base: provsupport.Base{Version: Version, Schema: Schema}}, nil
}

func (p *Provider) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	// Secrets are accepted so that RandomPassword's result and bcryptHash go back secret and
	// secret inputs stay secret in the outputs. Previews are answered (computed outputs unknown).
	return &pulumirpc.ConfigureResponse{AcceptSecrets: true, SupportsPreview: true}, nil
}

func typeOf(urn, typ string) (string, error) {
	if typ == "" {
		if u, err := resource.ParseURN(urn); err == nil {
			typ = string(u.Type())
		}
	}
	t, ok := CanonicalType(typ)
	if !ok {
		return "", fmt.Errorf("unknown resource type %q (the random stand-in serves %s)", typ, strings.Join(Types, ", "))
	}
	return t, nil
}

func (p *Provider) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	t, err := typeOf(req.GetUrn(), req.GetType())
	if err != nil {
		return nil, err
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	checked, failures := Normalize(t, news)
	inputs, err := provsupport.Marshal(checked, "inputs")
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CheckResponse{Inputs: inputs, Failures: failures}, nil
}

// inputsOnly keeps the input properties of type t (and drops nulls).
func inputsOnly(t string, m resource.PropertyMap) resource.PropertyMap {
	out := resource.PropertyMap{}
	for _, k := range inputNames(t) {
		if v, ok := m[resource.PropertyKey(k)]; ok && !v.IsNull() {
			out[resource.PropertyKey(k)] = v
		}
	}
	return out
}

// Diff compares the inputs (with defaults) only; every change is a replacement, as in the real
// provider (all its inputs are RequiresReplace).
func (p *Provider) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	t, err := typeOf(req.GetUrn(), req.GetType())
	if err != nil {
		return nil, err
	}
	olds := req.GetOldInputs()
	if olds == nil {
		olds = req.GetOlds()
	}
	o, err := provsupport.Unmarshal(olds, "olds")
	if err != nil {
		return nil, err
	}
	n, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	o, _ = Normalize(t, inputsOnly(t, o))
	n, _ = Normalize(t, inputsOnly(t, n))
	changes := provsupport.FilterIgnored(provsupport.DiffMaps(inputsOnly(t, o), inputsOnly(t, n)), req.GetIgnoreChanges())
	return provsupport.DiffResponse(changes, func(provsupport.Change) bool { return true }, false), nil
}

func (p *Provider) Create(_ context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	t, err := typeOf(req.GetUrn(), req.GetType())
	if err != nil {
		return nil, err
	}
	props, err := provsupport.Unmarshal(req.GetProperties(), "properties")
	if err != nil {
		return nil, err
	}
	inputs, failures := Normalize(t, props)
	if len(failures) > 0 {
		var msgs []string
		for _, f := range failures {
			msgs = append(msgs, f.GetReason())
		}
		return nil, fmt.Errorf("invalid %s: %s", t, strings.Join(msgs, "; "))
	}
	inputs = inputsOnly(t, inputs)
	if req.GetPreview() {
		outs := inputs.Copy()
		for _, k := range computedNames(t) {
			v := resource.MakeComputed(resource.NewProperty(""))
			if t == PasswordType {
				v = resource.MakeSecret(v)
			}
			outs[resource.PropertyKey(k)] = v
		}
		m, err := provsupport.Marshal(outs, "outputs")
		if err != nil {
			return nil, err
		}
		return &pulumirpc.CreateResponse{Properties: m}, nil
	}
	id, computed, err := Generate(t, inputs)
	if err != nil {
		return nil, err
	}
	outs := inputs.Copy()
	for k, v := range computed {
		outs[k] = v
	}
	m, err := provsupport.Marshal(outs, "outputs")
	if err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: m}, nil
}

func (p *Provider) Read(_ context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	if len(req.GetProperties().GetFields()) == 0 {
		// An import (`pulumi import`, a YAML `get`): only the id is known.
		t, err := typeOf(req.GetUrn(), req.GetType())
		if err != nil {
			return nil, err
		}
		id, outs, ins, err := Import(t, req.GetId())
		if err != nil {
			return nil, err
		}
		o, err := provsupport.Marshal(outs, "outputs")
		if err != nil {
			return nil, err
		}
		i, err := provsupport.Marshal(ins, "inputs")
		if err != nil {
			return nil, err
		}
		return &pulumirpc.ReadResponse{Id: id, Properties: o, Inputs: i}, nil
	}
	// There is nothing outside the state to drift from: read the state back as it is.
	return &pulumirpc.ReadResponse{Id: req.GetId(), Properties: req.GetProperties(), Inputs: req.GetInputs()}, nil
}

// Update is not reached in practice (every change replaces); it takes the new inputs and keeps
// the generated values, as the real provider does.
func (p *Provider) Update(_ context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	t, err := typeOf(req.GetUrn(), req.GetType())
	if err != nil {
		return nil, err
	}
	olds, err := provsupport.Unmarshal(req.GetOlds(), "olds")
	if err != nil {
		return nil, err
	}
	news, err := provsupport.Unmarshal(req.GetNews(), "news")
	if err != nil {
		return nil, err
	}
	news, _ = Normalize(t, news)
	outs := resource.PropertyMap{}
	for _, k := range computedNames(t) {
		if v, ok := olds[resource.PropertyKey(k)]; ok {
			outs[resource.PropertyKey(k)] = v
		}
	}
	for k, v := range inputsOnly(t, news) {
		outs[k] = v
	}
	m, err := provsupport.Marshal(outs, "outputs")
	if err != nil {
		return nil, err
	}
	return &pulumirpc.UpdateResponse{Properties: m}, nil
}

func (p *Provider) Delete(context.Context, *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	return &emptypb.Empty{}, nil
}

// Generate makes a resource's id and computed outputs from its checked inputs (known values).
func Generate(t string, in resource.PropertyMap) (string, resource.PropertyMap, error) {
	r := values{in}
	out := resource.PropertyMap{}
	set := func(k string, v any) { out[resource.PropertyKey(k)] = resource.NewPropertyValue(v) }
	switch t {
	case PetType:
		return PetName(r.int("length"), r.str("separator"), r.str("prefix")), out, nil
	case StringType, PasswordType:
		s, err := CreateString(StringParams{
			Length: r.int("length"), Upper: r.bool("upper"), Lower: r.bool("lower"),
			Numeric: r.bool("numeric"), Special: r.bool("special"), MinUpper: r.int("minUpper"),
			MinLower: r.int("minLower"), MinNumeric: r.int("minNumeric"), MinSpecial: r.int("minSpecial"),
			OverrideSpecial: r.str("overrideSpecial"),
		})
		if err != nil {
			return "", nil, err
		}
		if t == StringType {
			set("result", s)
			return s, out, nil
		}
		hash, err := Bcrypt(s)
		if err != nil {
			return "", nil, fmt.Errorf("generating bcryptHash: %w", err)
		}
		out["result"] = resource.MakeSecret(resource.NewProperty(s))
		out["bcryptHash"] = resource.MakeSecret(resource.NewProperty(hash))
		return "none", out, nil
	case IDType:
		id := NewRandomID(r.int("byteLength"), r.str("prefix"))
		set("b64Std", id.B64Std)
		set("b64Url", id.B64URL)
		set("dec", id.Dec)
		set("hex", id.Hex)
		return id.ID, out, nil
	case IntegerType:
		n := RandomInteger(int64(r.int("min")), int64(r.int("max")), r.str("seed"))
		set("result", float64(n))
		return strconv.FormatInt(n, 10), out, nil
	case UUIDType:
		u := NewUUID()
		set("result", u)
		return u, out, nil
	}
	return "", nil, fmt.Errorf("unknown resource type %q", t)
}

// values reads known (checked) property values, looking through secrets.
type values struct{ m resource.PropertyMap }

func (v values) get(k string) resource.PropertyValue {
	return provsupport.Plain(v.m[resource.PropertyKey(k)])
}

func (v values) int(k string) int {
	if p := v.get(k); p.IsNumber() {
		return int(p.NumberValue())
	}
	return 0
}

func (v values) bool(k string) bool {
	p := v.get(k)
	return p.IsBool() && p.BoolValue()
}

func (v values) str(k string) string {
	if p := v.get(k); p.IsString() {
		return p.StringValue()
	}
	return ""
}

// state of a property in a checker.
type state int

const (
	absent  state = iota
	unknown       // computed (a preview), or present but invalid
	known
)

// maxExact is the largest integer a Pulumi number (a float64) holds exactly.
const maxExact = 1 << 53

type checker struct {
	in, out  resource.PropertyMap
	failures []*pulumirpc.CheckFailure
}

func (c *checker) fail(prop, format string, args ...any) {
	c.failures = append(c.failures, &pulumirpc.CheckFailure{Property: prop, Reason: fmt.Sprintf(format, args...)})
}

func (c *checker) get(k string) (resource.PropertyValue, state) {
	v, ok := c.in[resource.PropertyKey(k)]
	if !ok || v.IsNull() {
		return v, absent
	}
	p := provsupport.Plain(v)
	switch {
	case p.IsComputed():
		return p, unknown
	case p.IsNull():
		return p, absent
	}
	return p, known
}

func (c *checker) required(k string) {
	if _, st := c.get(k); st == absent {
		c.fail(k, "missing required property %q", k)
	}
}

// setDefault sets k to def when it is not given.
func (c *checker) setDefault(k string, def any) {
	if _, st := c.get(k); st == absent {
		c.out[resource.PropertyKey(k)] = resource.NewPropertyValue(def)
	}
}

func describe(v resource.PropertyValue) string {
	return string(v.TypeString())
}

// integer reads an integer property that must be at least atLeast (when atLeast != nil).
func (c *checker) integer(k string, atLeast *int64) (int64, state) {
	v, st := c.get(k)
	if st != known {
		return 0, st
	}
	if !v.IsNumber() {
		c.fail(k, "%s must be an integer, not a %s", k, describe(v))
		return 0, unknown
	}
	f := v.NumberValue()
	if f != math.Trunc(f) || math.Abs(f) > maxExact {
		c.fail(k, "%s must be an integer, not %v", k, f)
		return 0, unknown
	}
	if atLeast != nil && int64(f) < *atLeast {
		c.fail(k, "%s must be at least %d, got %d", k, *atLeast, int64(f))
		return 0, unknown
	}
	return int64(f), known
}

func (c *checker) boolean(k string) (bool, state) {
	v, st := c.get(k)
	if st != known {
		return false, st
	}
	if !v.IsBool() {
		c.fail(k, "%s must be a boolean, not a %s", k, describe(v))
		return false, unknown
	}
	return v.BoolValue(), known
}

func (c *checker) str(k string) (string, state) {
	v, st := c.get(k)
	if st != known {
		return "", st
	}
	if !v.IsString() {
		c.fail(k, "%s must be a string, not a %s", k, describe(v))
		return "", unknown
	}
	return v.StringValue(), known
}

func (c *checker) keepers() {
	v, st := c.get("keepers")
	if st != known {
		return
	}
	if !v.IsObject() {
		c.fail("keepers", "keepers must be a map of strings, not a %s", describe(v))
		return
	}
	for k, e := range v.ObjectValue() {
		e = provsupport.Plain(e)
		if e.IsObject() || e.IsArray() || e.IsAsset() || e.IsArchive() || e.IsResourceReference() {
			c.fail("keepers", "keepers.%s must be a string, not a %s", k, describe(e))
		}
	}
}

func int64p(v int64) *int64 { return &v }

// Normalize validates inputs of type t and fills in the real provider's defaults (RandomPet
// length 2 and separator "-"; RandomString/RandomPassword special, upper, lower, numeric true,
// number = numeric, min* 0). Unknown values (previews) are not validated.
func Normalize(t string, in resource.PropertyMap) (resource.PropertyMap, []*pulumirpc.CheckFailure) {
	c := &checker{in: in, out: in.Copy()}
	valid := map[string]bool{}
	for _, k := range inputNames(t) {
		valid[k] = true
	}
	var unknownProps []string
	for k := range in {
		if !valid[string(k)] && !strings.HasPrefix(string(k), "__") {
			unknownProps = append(unknownProps, string(k))
		}
	}
	sort.Strings(unknownProps)
	for _, k := range unknownProps {
		c.fail(k, "unknown property %q: %s takes %s", k, t, strings.Join(inputNames(t), ", "))
	}
	c.keepers()
	switch t {
	case PetType:
		c.integer("length", int64p(1))
		c.setDefault("length", 2.0)
		c.str("prefix")
		c.str("separator")
		c.setDefault("separator", "-")
	case StringType, PasswordType:
		c.required("length")
		length, lengthSt := c.integer("length", int64p(1))
		allKnown := lengthSt == known
		var sum int64
		for _, k := range []string{"minNumeric", "minUpper", "minLower", "minSpecial"} {
			n, st := c.integer(k, int64p(0))
			c.setDefault(k, 0.0)
			sum += n
			allKnown = allKnown && st != unknown
		}
		if allKnown && length < sum {
			c.fail("length", "length (%d) must be at least the sum of minUpper, minLower, minNumeric and minSpecial (%d)", length, sum)
		}
		classes := map[string]bool{}
		classesKnown := true
		for _, k := range []string{"special", "upper", "lower"} {
			b, st := c.boolean(k)
			c.setDefault(k, true)
			classes[k] = b || st == absent
			classesKnown = classesKnown && st != unknown
		}
		number, numberSt := c.boolean("number")
		numeric, numericSt := c.boolean("numeric")
		switch {
		case numberSt == known && numericSt == known && number != numeric:
			c.fail("numeric", "number and numeric are both configured with different values (number is deprecated, use numeric instead)")
		case numberSt == absent && numericSt == absent:
			c.out["number"], c.out["numeric"] = resource.NewProperty(true), resource.NewProperty(true)
			numeric, numericSt = true, known
		case numberSt == absent:
			c.out["number"] = c.in["numeric"]
		case numericSt == absent:
			c.out["numeric"] = c.in["number"]
			numeric, numericSt = number, numberSt
		}
		if classesKnown && numericSt == known && !numeric && !classes["special"] && !classes["upper"] && !classes["lower"] {
			c.fail("numeric", "at least one of upper, lower, numeric and special must be true")
		}
		c.str("overrideSpecial")
	case IDType:
		c.required("byteLength")
		c.integer("byteLength", int64p(1))
		c.str("prefix")
	case IntegerType:
		c.required("min")
		c.required("max")
		lo, loSt := c.integer("min", nil)
		hi, hiSt := c.integer("max", nil)
		if loSt == known && hiSt == known && lo > hi {
			c.fail("min", "min (%d) must be less than or equal to max (%d)", lo, hi)
		}
		c.str("seed")
	case UUIDType:
	}
	return c.out, c.failures
}
