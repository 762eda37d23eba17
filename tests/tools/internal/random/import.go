package random

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
)

// Import builds the state of an existing resource from its import id (`pulumi import` or a
// YAML `get`), as the real provider's ImportState does:
//
//   - RandomString, RandomPassword: the id is the result (length = its bytes, defaults otherwise);
//   - RandomId: `<b64Url>` or `<prefix>,<b64Url>`;
//   - RandomInteger: `<result>,<min>,<max>` or `<result>,<min>,<max>,<seed>`;
//   - RandomUuid: the UUID;
//   - RandomPet cannot be imported (the real provider does not implement it either).
//
// It returns the resource id, the outputs and the inputs.
func Import(t, id string) (string, resource.PropertyMap, resource.PropertyMap, error) {
	in := resource.PropertyMap{}
	out := resource.PropertyMap{}
	set := func(m resource.PropertyMap, k string, v any) {
		m[resource.PropertyKey(k)] = resource.NewPropertyValue(v)
	}
	switch t {
	case StringType, PasswordType:
		set(in, "length", float64(len(id)))
		for _, k := range []string{"special", "upper", "lower", "number", "numeric"} {
			set(in, k, true)
		}
		for _, k := range []string{"minSpecial", "minUpper", "minLower", "minNumeric"} {
			set(in, k, 0.0)
		}
		out = in.Copy()
		if t == StringType {
			set(out, "result", id)
			return id, out, in, nil
		}
		hash, err := Bcrypt(id)
		if err != nil {
			return "", nil, nil, fmt.Errorf("generating bcryptHash: %w", err)
		}
		out["result"] = resource.MakeSecret(resource.NewProperty(id))
		out["bcryptHash"] = resource.MakeSecret(resource.NewProperty(hash))
		return "none", out, in, nil
	case IDType:
		prefix, b64 := "", id
		if i := strings.LastIndex(id, ","); i >= 0 {
			prefix, b64 = id[:i], id[i+1:]
		}
		b, err := base64.RawURLEncoding.DecodeString(b64)
		if err != nil {
			return "", nil, nil, fmt.Errorf("importing a RandomId: %q is not URL-safe base64 without padding "+
				"(the id is <b64Url> or <prefix>,<b64Url>): %w", b64, err)
		}
		set(in, "byteLength", float64(len(b)))
		if prefix != "" {
			set(in, "prefix", prefix)
		}
		v := EncodeRandomID(b, prefix)
		out = in.Copy()
		set(out, "b64Std", v.B64Std)
		set(out, "b64Url", v.B64URL)
		set(out, "dec", v.Dec)
		set(out, "hex", v.Hex)
		return v.ID, out, in, nil
	case IntegerType:
		parts := strings.Split(id, ",")
		if len(parts) != 3 && len(parts) != 4 {
			return "", nil, nil, fmt.Errorf("importing a RandomInteger: expecting {result},{min},{max} or {result},{min},{max},{seed}, not %q", id)
		}
		var n [3]int64
		for i, name := range []string{"result", "min", "max"} {
			v, err := strconv.ParseInt(parts[i], 10, 64)
			if err != nil {
				return "", nil, nil, fmt.Errorf("importing a RandomInteger: the %s %q is not an integer", name, parts[i])
			}
			n[i] = v
		}
		set(in, "min", float64(n[1]))
		set(in, "max", float64(n[2]))
		if len(parts) == 4 {
			set(in, "seed", parts[3])
		}
		out = in.Copy()
		set(out, "result", float64(n[0]))
		return parts[0], out, in, nil
	case UUIDType:
		u := strings.ToLower(id)
		if len(u) != 36 || u[8] != '-' || u[13] != '-' || u[18] != '-' || u[23] != '-' {
			return "", nil, nil, fmt.Errorf("importing a RandomUuid: %q is not a UUID (8-4-4-4-12 hexadecimal digits)", id)
		}
		if _, err := hex.DecodeString(strings.ReplaceAll(u, "-", "")); err != nil {
			return "", nil, nil, fmt.Errorf("importing a RandomUuid: %q is not a UUID: %w", id, err)
		}
		set(out, "result", u)
		return u, out, in, nil
	}
	return "", nil, nil, fmt.Errorf("%s cannot be imported (the real provider does not support it either)", t)
}
