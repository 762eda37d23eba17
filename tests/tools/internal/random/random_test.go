package random

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pulumi-operator-rs/test-tools/internal/provsupport"
)

// noLoader satisfies schema.Loader; the schema references no other packages, so it is never called.
type noLoader struct{ schema.Loader }

func TestSchemaBinds(t *testing.T) {
	var spec schema.PackageSpec
	if err := json.Unmarshal(Schema(), &spec); err != nil {
		t.Fatal(err)
	}
	pkg, diags, err := schema.BindSpec(spec, noLoader{}, schema.ValidationOptions{})
	if err != nil || diags.HasErrors() {
		t.Fatalf("schema does not bind: %v %v", err, diags)
	}
	if pkg.Version == nil || pkg.Version.String() != Version {
		t.Errorf("version %v", pkg.Version)
	}
	for _, tok := range Types {
		if _, ok := pkg.GetResource(tok); !ok {
			t.Errorf("resource %s missing", tok)
		}
	}
	pw, _ := pkg.GetResource(PasswordType)
	secrets := map[string]bool{}
	for _, p := range pw.Properties {
		secrets[p.Name] = p.Secret
	}
	if !secrets["result"] || !secrets["bcryptHash"] || secrets["length"] {
		t.Errorf("RandomPassword secrets: %v", secrets)
	}
	integer, _ := pkg.GetResource(IntegerType)
	var required []string
	for _, p := range integer.InputProperties {
		if !p.IsRequired() {
			continue
		}
		required = append(required, p.Name)
	}
	if strings.Join(required, ",") != "max,min" {
		t.Errorf("RandomInteger required inputs: %v", required)
	}
}

func TestCanonicalType(t *testing.T) {
	for in, want := range map[string]string{
		PetType:                        PetType,
		"random:index:RandomPet":       PetType,
		"random:RandomPet":             PetType,
		"random:RandomPassword":        PasswordType,
		"random:index:RandomUuid":      UUIDType,
		"random:index:RandomId":        IDType,
		"random:RandomInteger":         IntegerType,
		"random:index:RandomString":    StringType,
		"random:index:RandomShuffle":   "",
		"random:other:RandomPet":       "",
		"standin:index:RandomPet":      "",
		"random:index/randomUuid4:Foo": "",
	} {
		got, ok := CanonicalType(in)
		if got != want || ok != (want != "") {
			t.Errorf("CanonicalType(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func props(kv ...any) resource.PropertyMap {
	m := resource.PropertyMap{}
	for i := 0; i < len(kv); i += 2 {
		m[resource.PropertyKey(kv[i].(string))] = resource.NewPropertyValue(kv[i+1])
	}
	return m
}

func failureProps(fs []*pulumirpc.CheckFailure) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Property+": "+f.Reason)
	}
	return out
}

func TestNormalizeDefaults(t *testing.T) {
	out, fs := Normalize(PetType, props())
	if len(fs) != 0 || out["length"].NumberValue() != 2 || out["separator"].StringValue() != "-" {
		t.Errorf("pet defaults: %v %v", out, failureProps(fs))
	}
	out, fs = Normalize(StringType, props("length", 12.0))
	if len(fs) != 0 {
		t.Fatalf("string: %v", failureProps(fs))
	}
	for _, k := range []resource.PropertyKey{"special", "upper", "lower", "number", "numeric"} {
		if !out[k].IsBool() || !out[k].BoolValue() {
			t.Errorf("string default %s = %v", k, out[k])
		}
	}
	for _, k := range []resource.PropertyKey{"minNumeric", "minUpper", "minLower", "minSpecial"} {
		if !out[k].IsNumber() || out[k].NumberValue() != 0 {
			t.Errorf("string default %s = %v", k, out[k])
		}
	}
	// number (deprecated) and numeric mirror each other.
	out, _ = Normalize(PasswordType, props("length", 8.0, "number", false))
	if out["numeric"].BoolValue() {
		t.Errorf("numeric does not follow number: %v", out)
	}
	out, _ = Normalize(PasswordType, props("length", 8.0, "numeric", false))
	if out["number"].BoolValue() {
		t.Errorf("number does not follow numeric: %v", out)
	}
	// Defaults make an explicit default and an absent property equal (no diff).
	a, _ := Normalize(PetType, props("length", 2.0))
	b, _ := Normalize(PetType, props())
	if !a.DeepEquals(b) {
		t.Errorf("explicit default differs: %v %v", a, b)
	}
}

func TestNormalizeFailures(t *testing.T) {
	for _, tc := range []struct {
		typ   string
		in    resource.PropertyMap
		field string
		text  string
	}{
		{PetType, props("length", 0.0), "length", "at least 1"},
		{PetType, props("length", 1.5), "length", "integer"},
		{PetType, props("length", "two"), "length", "integer"},
		{PetType, props("lenght", 2.0), "lenght", "unknown property"},
		{StringType, props(), "length", "missing required"},
		{StringType, props("length", 0.0), "length", "at least 1"},
		{StringType, props("length", 4.0, "minUpper", 3.0, "minNumeric", 2.0), "length", "sum"},
		{StringType, props("length", 4.0, "minSpecial", -1.0), "minSpecial", "at least 0"},
		{PasswordType, props("length", 4.0, "upper", false, "lower", false, "numeric", false, "special", false), "numeric", "at least one"},
		{PasswordType, props("length", 4.0, "number", true, "numeric", false), "numeric", "different values"},
		{PasswordType, props("length", 4.0, "keepers", map[string]any{"a": []any{"x"}}), "keepers", "keepers.a"},
		{IDType, props(), "byteLength", "missing required"},
		{IDType, props("byteLength", 0.0), "byteLength", "at least 1"},
		{IntegerType, props("min", 1.0), "max", "missing required"},
		{IntegerType, props("min", 5.0, "max", 1.0), "min", "less than or equal"},
		{IntegerType, props("min", 1.0, "max", 5.0, "seed", 3.0), "seed", "string"},
		{UUIDType, props("keepers", "x"), "keepers", "map"},
	} {
		_, fs := Normalize(tc.typ, tc.in)
		found := false
		for _, f := range fs {
			if f.Property == tc.field && strings.Contains(f.Reason, tc.text) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s %v: want a failure on %s (%q), got %v", tc.typ, tc.in, tc.field, tc.text, failureProps(fs))
		}
	}
	// Unknown values (previews) are not validated.
	unknown := resource.MakeComputed(resource.NewProperty(""))
	_, fs := Normalize(StringType, resource.PropertyMap{"length": unknown, "minUpper": resource.NewProperty(5.0)})
	if len(fs) != 0 {
		t.Errorf("unknown length: %v", failureProps(fs))
	}
	_, fs = Normalize(IntegerType, resource.PropertyMap{"min": resource.NewProperty(5.0), "max": unknown})
	if len(fs) != 0 {
		t.Errorf("unknown max: %v", failureProps(fs))
	}
	// Secret inputs are validated through the secret.
	_, fs = Normalize(StringType, resource.PropertyMap{"length": resource.MakeSecret(resource.NewProperty(0.0))})
	if len(fs) != 1 {
		t.Errorf("secret length: %v", failureProps(fs))
	}
}

func TestCreateString(t *testing.T) {
	for i := 0; i < 50; i++ {
		s, err := CreateString(StringParams{Length: 20, Upper: true, Lower: true, Numeric: true, Special: true,
			MinUpper: 3, MinLower: 3, MinNumeric: 3, MinSpecial: 3})
		if err != nil {
			t.Fatal(err)
		}
		var up, lo, num, sp int
		for _, r := range s {
			switch {
			case unicode.IsUpper(r):
				up++
			case unicode.IsLower(r):
				lo++
			case unicode.IsDigit(r):
				num++
			case strings.ContainsRune(DefaultSpecialChars, r):
				sp++
			default:
				t.Fatalf("unexpected %q in %q", r, s)
			}
		}
		if len(s) != 20 || up < 3 || lo < 3 || num < 3 || sp < 3 {
			t.Fatalf("%q does not meet the minimums", s)
		}
	}
	s, _ := CreateString(StringParams{Length: 64, Numeric: true})
	if !regexp.MustCompile(`^[0-9]{64}$`).MatchString(s) {
		t.Errorf("numeric only: %q", s)
	}
	s, _ = CreateString(StringParams{Length: 32, Special: true, OverrideSpecial: "_é"})
	if !regexp.MustCompile(`^[_é]{32}$`).MatchString(s) {
		t.Errorf("overrideSpecial: %q", s)
	}
	// As in the real provider, a minimum draws from its class even when the class is disabled.
	s, _ = CreateString(StringParams{Length: 6, Lower: true, MinUpper: 2})
	if n := len(regexp.MustCompile(`[A-Z]`).FindAllString(s, -1)); n != 2 {
		t.Errorf("minUpper with upper=false: %q", s)
	}
	if _, err := CreateString(StringParams{Length: 4}); err != ErrEmptyCharset {
		t.Errorf("empty charset: %v", err)
	}
}

func TestPetName(t *testing.T) {
	if n := PetName(1, "-", ""); !regexp.MustCompile(`^[a-z]+$`).MatchString(n) {
		t.Errorf("one word: %q", n)
	}
	if n := PetName(2, "-", ""); !regexp.MustCompile(`^[a-z]+-[a-z]+$`).MatchString(n) {
		t.Errorf("two words: %q", n)
	}
	n := PetName(4, "_", "My")
	parts := strings.Split(n, "_")
	if len(parts) != 5 || parts[0] != "My" || strings.ToLower(n[3:]) != n[3:] {
		t.Errorf("prefixed four words: %q", n)
	}
	if !contains(petNames, parts[4]) || !contains(petAdjectives, parts[3]) || !contains(petAdverbs, parts[1]) {
		t.Errorf("word classes: %q", n)
	}
}

func contains(list []string, s string) bool {
	for _, w := range list {
		if w == s {
			return true
		}
	}
	return false
}

func TestRandomID(t *testing.T) {
	id := EncodeRandomID([]byte{0xfb, 0xff, 0x01, 0x02}, "p-")
	want := RandomID{ID: "-_8BAg", B64URL: "p--_8BAg", B64Std: "p-+/8BAg==", Hex: "p-fbff0102", Dec: "p-4227793154"}
	if id != want {
		t.Errorf("EncodeRandomID = %+v, want %+v", id, want)
	}
	if r := NewRandomID(8, ""); len(r.Hex) != 16 || r.B64URL != r.ID {
		t.Errorf("NewRandomID: %+v", r)
	}
}

func TestRandomInteger(t *testing.T) {
	// The real provider's values for these seeds (terraform-provider-random's acceptance tests).
	if n := RandomInteger(1, 3, "12345"); n != 3 {
		t.Errorf("seed 12345: %d", n)
	}
	if n := RandomInteger(1, 3, "123456"); n != 2 {
		t.Errorf("seed 123456: %d", n)
	}
	for i := 0; i < 200; i++ {
		if n := RandomInteger(-2, 2, ""); n < -2 || n > 2 {
			t.Fatalf("out of range: %d", n)
		}
	}
	if n := RandomInteger(7, 7, ""); n != 7 {
		t.Errorf("single value: %d", n)
	}
}

func TestUUID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if a, b := NewUUID(), NewUUID(); !re.MatchString(a) || a == b {
		t.Errorf("uuids %q %q", a, b)
	}
}

func TestImport(t *testing.T) {
	id, outs, ins, err := Import(IDType, "app-,-_8BAg")
	if err != nil || id != "-_8BAg" || outs["hex"].StringValue() != "app-fbff0102" || ins["byteLength"].NumberValue() != 4 ||
		ins["prefix"].StringValue() != "app-" {
		t.Errorf("id: %s %v %v %v", id, outs, ins, err)
	}
	id, outs, ins, err = Import(IntegerType, "3,1,3,12345")
	if err != nil || id != "3" || outs["result"].NumberValue() != 3 || ins["seed"].StringValue() != "12345" {
		t.Errorf("integer: %s %v %v %v", id, outs, ins, err)
	}
	id, outs, _, err = Import(StringType, "hello")
	if err != nil || id != "hello" || outs["result"].StringValue() != "hello" || outs["length"].NumberValue() != 5 {
		t.Errorf("string: %s %v %v", id, outs, err)
	}
	id, _, _, err = Import(UUIDType, "6D4B1C4E-0F2A-4B7C-9D1E-2F3A4B5C6D7E")
	if err != nil || id != "6d4b1c4e-0f2a-4b7c-9d1e-2f3a4b5c6d7e" {
		t.Errorf("uuid: %s %v", id, err)
	}
	for typ, bad := range map[string]string{IntegerType: "3,1", IDType: "not base64!", UUIDType: "nope", PetType: "my-pet"} {
		if _, _, _, err := Import(typ, bad); err == nil {
			t.Errorf("%s %q imported", typ, bad)
		}
	}
	// An imported resource has no diff against the program that made it.
	_, _, ins, _ = Import(IntegerType, "3,1,3,12345")
	checked, _ := Normalize(IntegerType, props("min", 1.0, "max", 3.0, "seed", "12345"))
	if !ins.DeepEquals(checked) {
		t.Errorf("imported inputs %v differ from %v", ins, checked)
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func create(t *testing.T, typ string, in map[string]any) (string, resource.PropertyMap) {
	t.Helper()
	p, ctx := &Provider{}, context.Background()
	chk, err := p.Check(ctx, &pulumirpc.CheckRequest{Type: typ, News: mustStruct(t, in)})
	if err != nil || len(chk.Failures) != 0 {
		t.Fatalf("check %s: %v %v", typ, chk, err)
	}
	resp, err := p.Create(ctx, &pulumirpc.CreateRequest{Type: typ, Properties: chk.Inputs})
	if err != nil {
		t.Fatalf("create %s: %v", typ, err)
	}
	outs, err := provsupport.Unmarshal(resp.Properties, "outs")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Id, outs
}

func TestCreate(t *testing.T) {
	id, outs := create(t, "random:index:RandomPet", map[string]any{"prefix": "web", "keepers": map[string]any{"k": "1"}})
	if !strings.HasPrefix(id, "web-") || len(strings.Split(id, "-")) != 3 || outs["length"].NumberValue() != 2 ||
		outs["keepers"].ObjectValue()["k"].StringValue() != "1" {
		t.Errorf("pet: %s %v", id, outs)
	}
	id, outs = create(t, StringType, map[string]any{"length": 10, "special": false})
	if len(id) != 10 || outs["result"].StringValue() != id || outs["result"].IsSecret() || outs["special"].BoolValue() {
		t.Errorf("string: %s %v", id, outs)
	}
	id, outs = create(t, PasswordType, map[string]any{"length": 16})
	if id != "none" || !outs["result"].IsSecret() || !outs["bcryptHash"].IsSecret() {
		t.Fatalf("password: %s %v", id, outs)
	}
	pw := outs["result"].SecretValue().Element.StringValue()
	if len(pw) != 16 || !BcryptMatches(outs["bcryptHash"].SecretValue().Element.StringValue(), pw) {
		t.Errorf("password %q / hash do not match", pw)
	}
	id, outs = create(t, IDType, map[string]any{"byteLength": 4, "prefix": "x-"})
	if outs["b64Url"].StringValue() != "x-"+id || len(outs["hex"].StringValue()) != 10 || outs["dec"].StringValue() == "" {
		t.Errorf("id: %s %v", id, outs)
	}
	id, outs = create(t, IntegerType, map[string]any{"min": 1, "max": 3, "seed": "12345"})
	if id != "3" || outs["result"].NumberValue() != 3 {
		t.Errorf("integer: %s %v", id, outs)
	}
	id, outs = create(t, UUIDType, map[string]any{})
	if outs["result"].StringValue() != id || len(id) != 36 {
		t.Errorf("uuid: %s %v", id, outs)
	}
}

func TestPreviewAndRead(t *testing.T) {
	p, ctx := &Provider{}, context.Background()
	resp, err := p.Create(ctx, &pulumirpc.CreateRequest{Type: PasswordType, Preview: true,
		Properties: mustStruct(t, map[string]any{"length": 8})})
	if err != nil || resp.Id != "" {
		t.Fatalf("preview: %v %v", resp, err)
	}
	outs, _ := provsupport.Unmarshal(resp.Properties, "outs")
	if r := outs["result"]; !r.IsSecret() || !r.SecretValue().Element.IsComputed() {
		t.Errorf("preview result: %v", outs)
	}
	state := mustStruct(t, map[string]any{"length": 8, "result": "abc"})
	read, err := p.Read(ctx, &pulumirpc.ReadRequest{Id: "none", Type: StringType, Properties: state, Inputs: state})
	if err != nil || read.Id != "none" || read.Properties != state {
		t.Errorf("read: %v %v", read, err)
	}
	imp, err := p.Read(ctx, &pulumirpc.ReadRequest{Id: "abc", Type: PasswordType})
	if err != nil || imp.Id != "none" {
		t.Fatalf("import: %v %v", imp, err)
	}
	outs, _ = provsupport.Unmarshal(imp.Properties, "outs")
	ins, _ := provsupport.Unmarshal(imp.Inputs, "ins")
	if outs["result"].SecretValue().Element.StringValue() != "abc" || ins["length"].NumberValue() != 3 ||
		!BcryptMatches(outs["bcryptHash"].SecretValue().Element.StringValue(), "abc") {
		t.Errorf("imported password: %v %v", outs, ins)
	}
	if _, err := p.Read(ctx, &pulumirpc.ReadRequest{Id: "my-pet", Type: PetType}); err == nil {
		t.Error("pet import accepted")
	}
	if _, err := p.Check(ctx, &pulumirpc.CheckRequest{Type: "random:index:RandomShuffle"}); err == nil {
		t.Error("unknown type accepted")
	}
}

func TestDiff(t *testing.T) {
	p, ctx := &Provider{}, context.Background()
	diff := func(typ string, olds, news map[string]any) *pulumirpc.DiffResponse {
		t.Helper()
		d, err := p.Diff(ctx, &pulumirpc.DiffRequest{Type: typ, OldInputs: mustStruct(t, olds), News: mustStruct(t, news)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := diff(PetType, map[string]any{"keepers": map[string]any{"a": "1"}}, map[string]any{"keepers": map[string]any{"a": "2"}})
	if d.Changes != pulumirpc.DiffResponse_DIFF_SOME || strings.Join(d.Replaces, ",") != "keepers" ||
		d.DetailedDiff["keepers.a"].Kind != pulumirpc.PropertyDiff_UPDATE_REPLACE || d.DeleteBeforeReplace {
		t.Errorf("keeper change: %v", d)
	}
	d = diff(StringType, map[string]any{"length": 8}, map[string]any{"length": 9, "special": false})
	if strings.Join(d.Replaces, ",") != "length,special" {
		t.Errorf("input change: %v", d)
	}
	// Defaults are no change, and computed outputs in the old state are not inputs.
	d = diff(PetType, map[string]any{"length": 2, "separator": "-"}, map[string]any{})
	if d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("defaults: %v", d)
	}
	d, _ = p.Diff(ctx, &pulumirpc.DiffRequest{Type: IntegerType,
		Olds: mustStruct(t, map[string]any{"min": 1, "max": 3, "result": 2}), News: mustStruct(t, map[string]any{"min": 1, "max": 3})})
	if d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("outputs in olds: %v", d)
	}
	d, _ = p.Diff(ctx, &pulumirpc.DiffRequest{Type: UUIDType, IgnoreChanges: []string{"keepers"},
		OldInputs: mustStruct(t, map[string]any{"keepers": map[string]any{"a": "1"}}),
		News:      mustStruct(t, map[string]any{"keepers": map[string]any{"a": "2"}})})
	if d.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("ignoreChanges: %v", d)
	}
}
