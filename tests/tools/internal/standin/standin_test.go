package standin

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/codegen/schema"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/structpb"
)

// noLoader satisfies schema.Loader; the schemas reference no other packages, so it is never called.
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
	for _, tok := range []string{RecordType, FailType, SleepType} {
		if _, ok := pkg.GetResource(tok); !ok {
			t.Errorf("resource %s missing", tok)
		}
	}
	rec, _ := pkg.GetResource(RecordType)
	names := map[string]bool{}
	for _, p := range rec.InputProperties {
		names[p.Name] = true
	}
	// Every property name the project's tests put on a Record.
	for _, n := range []string{"value", "v", "x", "greeting", "count", "region", "first", "password", "token",
		"user", "text", "plain", "fromMap", "message", "replicas", "dbPassword"} {
		if !names[n] {
			t.Errorf("Record lacks property %q", n)
		}
	}
}

func TestFailIn(t *testing.T) {
	props := func(kv ...string) resource.PropertyMap {
		m := resource.PropertyMap{}
		for i := 0; i < len(kv); i += 2 {
			m[resource.PropertyKey(kv[i])] = resource.NewProperty(kv[i+1])
		}
		return m
	}
	if err := failIn(props(), "create"); err == nil || err.Error() != DefaultFailMessage {
		t.Errorf("default: %v", err)
	}
	if err := failIn(props(), "delete"); err != nil {
		t.Errorf("default phase is create only: %v", err)
	}
	if err := failIn(props("phase", "update", "message", "boom"), "create"); err != nil {
		t.Errorf("update phase must not fail create: %v", err)
	}
	if err := failIn(props("phase", "update", "message", "boom"), "update"); err == nil || err.Error() != "boom" {
		t.Errorf("update phase: %v", err)
	}
	for _, ph := range []string{"create", "update", "delete"} {
		if err := failIn(props("phase", "always"), ph); err == nil {
			t.Errorf("always must fail %s", ph)
		}
	}
	secret := resource.PropertyMap{"message": resource.MakeSecret(resource.NewProperty("hidden"))}
	if err := failIn(secret, "create"); err == nil || err.Error() != "hidden" {
		t.Errorf("secret message: %v", err)
	}
}

func TestDuration(t *testing.T) {
	d, err := Duration(resource.PropertyMap{"seconds": resource.NewProperty(1.5)}, "seconds", "createDuration")
	if err != nil || d != 1500*time.Millisecond {
		t.Errorf("seconds: %v %v", d, err)
	}
	d, err = Duration(resource.PropertyMap{"createDuration": resource.NewProperty("1m30s")}, "seconds", "createDuration")
	if err != nil || d != 90*time.Second {
		t.Errorf("duration: %v %v", d, err)
	}
	d, err = Duration(resource.PropertyMap{}, "deleteSeconds", "destroyDuration")
	if err != nil || d != 0 {
		t.Errorf("none: %v %v", d, err)
	}
}

func TestSleepForCancellation(t *testing.T) {
	cancel := make(chan struct{})
	close(cancel)
	start := time.Now()
	if err := SleepFor(context.Background(), cancel, 5*time.Second, true); !errors.Is(err, context.Canceled) ||
		err.Error() != "context canceled" {
		t.Errorf("abortOnCancel: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Error("abortOnCancel did not abort promptly")
	}
	start = time.Now()
	if err := SleepFor(context.Background(), cancel, 300*time.Millisecond, false); err != nil {
		t.Errorf("finish in-flight sleep: %v", err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Error("the in-flight sleep must finish")
	}
	ctx, stop := context.WithCancel(context.Background())
	stop()
	if err := SleepFor(ctx, make(chan struct{}), time.Second, true); !errors.Is(err, context.Canceled) {
		t.Errorf("request cancelled: %v", err)
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCheckAndDiff(t *testing.T) {
	p := &Provider{}
	ctx := context.Background()
	resp, err := p.Check(ctx, &pulumirpc.CheckRequest{Type: FailType, News: mustStruct(t, map[string]any{"phase": "later"})})
	if err != nil || len(resp.Failures) != 1 || resp.Failures[0].Property != "phase" {
		t.Errorf("bad phase: %v %v", resp, err)
	}
	resp, err = p.Check(ctx, &pulumirpc.CheckRequest{Type: SleepType, News: mustStruct(t, map[string]any{"createDuration": "soon"})})
	if err != nil || len(resp.Failures) != 1 {
		t.Errorf("bad duration: %v %v", resp, err)
	}
	if _, err := p.Check(ctx, &pulumirpc.CheckRequest{Type: "standin:index:Nope"}); err == nil {
		t.Error("unknown type accepted")
	}

	diff, err := p.Diff(ctx, &pulumirpc.DiffRequest{Type: RecordType,
		OldInputs: mustStruct(t, map[string]any{"value": "a"}), News: mustStruct(t, map[string]any{"value": "b"})})
	if err != nil || diff.Changes != pulumirpc.DiffResponse_DIFF_SOME || len(diff.Replaces) != 0 {
		t.Errorf("record update: %v %v", diff, err)
	}
	diff, _ = p.Diff(ctx, &pulumirpc.DiffRequest{Type: RecordType,
		OldInputs: mustStruct(t, map[string]any{"value": "a"}), News: mustStruct(t, map[string]any{"value": "a"})})
	if diff.Changes != pulumirpc.DiffResponse_DIFF_NONE {
		t.Errorf("record same: %v", diff)
	}
	diff, _ = p.Diff(ctx, &pulumirpc.DiffRequest{Type: SleepType,
		OldInputs: mustStruct(t, map[string]any{"seconds": 1, "triggers": map[string]any{"a": "1"}}),
		News:      mustStruct(t, map[string]any{"seconds": 2, "triggers": map[string]any{"a": "2"}})})
	if len(diff.Replaces) != 1 || diff.Replaces[0] != "triggers" ||
		diff.DetailedDiff["seconds"].Kind != pulumirpc.PropertyDiff_UPDATE ||
		diff.DetailedDiff["triggers.a"].Kind != pulumirpc.PropertyDiff_UPDATE_REPLACE {
		t.Errorf("sleep triggers: %v", diff)
	}
}
