package provsupport

import (
	"context"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func TestDiffMaps(t *testing.T) {
	olds := resource.NewPropertyMapFromMap(map[string]any{
		"a": "x", "gone": 1, "obj": map[string]any{"k.with.dots": "1", "same": true},
		"list": []any{"a", "b"}, "nul": nil,
	})
	news := resource.NewPropertyMapFromMap(map[string]any{
		"a": "y", "obj": map[string]any{"k.with.dots": "2", "same": true},
		"list": []any{"a", "b", "c"}, "added": "z",
	})
	news["secret"] = resource.MakeSecret(resource.NewProperty("s"))
	olds["secret"] = resource.NewProperty("s")
	got := map[string]pulumirpc.PropertyDiff_Kind{}
	for _, c := range DiffMaps(olds, news) {
		got[c.Key()] = c.Kind
	}
	want := map[string]pulumirpc.PropertyDiff_Kind{
		"a":                  pulumirpc.PropertyDiff_UPDATE,
		"gone":               pulumirpc.PropertyDiff_DELETE,
		`obj["k.with.dots"]`: pulumirpc.PropertyDiff_UPDATE,
		"list[2]":            pulumirpc.PropertyDiff_ADD,
		"added":              pulumirpc.PropertyDiff_ADD,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
	unknown := resource.PropertyMap{"a": resource.MakeComputed(resource.NewProperty(""))}
	if cs := DiffMaps(resource.PropertyMap{"a": resource.NewProperty("x")}, unknown); len(cs) != 1 {
		t.Errorf("unknown must be a change: %v", cs)
	}
}

func TestFilterIgnoredAndResponse(t *testing.T) {
	changes := DiffMaps(
		resource.NewPropertyMapFromMap(map[string]any{"a": map[string]any{"b": 1, "c": 1}, "d": 1}),
		resource.NewPropertyMapFromMap(map[string]any{"a": map[string]any{"b": 2, "c": 2}, "d": 2}))
	kept := FilterIgnored(changes, []string{"a.b"})
	if len(kept) != 2 {
		t.Fatalf("kept %v", kept)
	}
	resp := DiffResponse(kept, func(c Change) bool { return c.Top() == "d" }, true)
	if resp.Changes != pulumirpc.DiffResponse_DIFF_SOME || len(resp.Replaces) != 1 || !resp.DeleteBeforeReplace ||
		resp.DetailedDiff["d"].Kind != pulumirpc.PropertyDiff_UPDATE_REPLACE ||
		resp.DetailedDiff["a.c"].Kind != pulumirpc.PropertyDiff_UPDATE {
		t.Errorf("response %v", resp)
	}
	if r := DiffResponse(nil, nil, true); r.Changes != pulumirpc.DiffResponse_DIFF_NONE || r.DeleteBeforeReplace {
		t.Errorf("no changes %v", r)
	}
}

func TestCanceller(t *testing.T) {
	var c Canceller
	ctx, cancel := c.Context(context.Background())
	defer cancel()
	c.Cancel()
	c.Cancel()
	<-ctx.Done()
	<-c.Done()
}
