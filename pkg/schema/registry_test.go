package schema_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func status(err error) int {
	if err == nil {
		return 200
	}
	return ojserr.As(err).Status()
}

// Versions are registered once (the same schema again is idempotent,
// another is a 409), read by version or latest, listed and deleted; a
// schema that does not compile is a 400.
func TestRegistry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	r := schema.New(st.DB(), st.Table(), nil)
	v1 := json.RawMessage(`{"type": "array", "minItems": 1}`)
	if v, created, err := r.Register(ctx, "mail.send", "1", v1); err != nil || !created || v.Version != 1 || string(v.Schema) != `{"type":"array","minItems":1}` {
		t.Fatalf("register: %+v %v %v", v, created, err)
	}
	if _, created, err := r.Register(ctx, "mail.send", "1", v1); err != nil || created {
		t.Fatalf("the same schema again: created %v, %v", created, err)
	}
	if _, _, err := r.Register(ctx, "mail.send", "1", json.RawMessage(`{"type":"object"}`)); status(err) != 409 {
		t.Fatalf("another schema under version 1: %v", err)
	}
	for _, c := range []struct{ typ, version, schema string }{{"mail.send", "2", `{"type": 5}`}, {"mail.send", "0", `{}`}, {"Bad Type", "1", `{}`}, {"mail.send", "2", ``}} {
		if _, _, err := r.Register(ctx, c.typ, c.version, json.RawMessage(c.schema)); status(err) != 400 {
			t.Errorf("register %+v: %v, want 400", c, err)
		}
	}
	if _, _, err := r.Register(ctx, "mail.send", "2", json.RawMessage(`{"type":"array","minItems":2}`)); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Get(ctx, "mail.send", ""); err != nil || v.Version != 2 {
		t.Fatalf("latest: %+v %v", v, err)
	}
	if v, err := r.Get(ctx, "mail.send", "1"); err != nil || v.Version != 1 {
		t.Fatalf("version 1: %+v %v", v, err)
	}
	if vs, err := r.Versions(ctx, "mail.send"); err != nil || len(vs) != 2 || vs[0].Version != 1 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	if err := r.Delete(ctx, "mail.send", "2"); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, "mail.send", "2"); status(err) != 404 {
		t.Fatalf("delete twice: %v", err)
	}
	if v, err := r.Get(ctx, "mail.send", ""); err != nil || v.Version != 1 {
		t.Fatalf("latest after the delete: %+v %v", v, err)
	}
	if _, err := r.Get(ctx, "none.here", ""); status(err) != 404 {
		t.Fatalf("no schema: %v", err)
	}
}

// PUSH validation: a type without a schema passes; args are checked
// against the version the envelope names, else the latest; a failure is
// 422 schema_validation; a process reads a type's versions once per
// CacheFor.
func TestValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := testenv.Table(t)
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	r := schema.New(st.DB(), st.Table(), func() time.Time { return now })
	other := schema.New(st.DB(), st.Table(), nil) // another api function
	push := func(typ, args, version string) error {
		j := &job.Job{Type: typ, Args: json.RawMessage(args)}
		if version != "" {
			j.Extra = map[string]json.RawMessage{"version": json.RawMessage(version)}
		}
		return r.Validate(ctx, j)
	}
	if err := push("free.form", `[1,"x"]`, ""); err != nil {
		t.Fatalf("no schema: %v", err)
	}
	// A producer that asks for validation (meta.ojs_validate) of a type
	// with no schema is refused; asking false changes nothing.
	for meta, want := range map[string]int{`{"ojs_validate":true}`: 422, `{"ojs_validate":false}`: 0, `{"other":1}`: 0} {
		err := r.Validate(ctx, &job.Job{Type: "unschemed.job", Args: json.RawMessage(`[]`), Meta: json.RawMessage(meta)})
		if (want == 0) != (err == nil) || (err != nil && status(err) != want) {
			t.Errorf("meta %s: %v, want %d", meta, err, want)
		}
	}
	for version, v := range map[string]string{"1": `{"type":"array","items":{"type":"string"}}`, "2": `{"type":"array","items":{"type":"number"}}`} {
		if _, _, err := other.Register(ctx, "typed.job", version, json.RawMessage(v)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := other.Register(ctx, "tuple.job", "1", json.RawMessage(`{"type":"array","items":[{"type":"string"},{"type":"number"}]}`)); err != nil {
		t.Fatalf("a draft-7 tuple schema: %v", err)
	}
	if err := push("tuple.job", `["a",1]`, ""); err != nil {
		t.Fatalf("tuple args: %v", err)
	}
	if err := push("tuple.job", `[1,"a"]`, ""); status(err) != 422 {
		t.Fatalf("tuple args in the wrong order: %v", err)
	}
	if _, _, err := other.Register(ctx, "free.form", "1", json.RawMessage(`{"maxItems":0}`)); err != nil {
		t.Fatal(err)
	}
	if err := push("free.form", `[1]`, ""); err != nil {
		t.Fatalf("a schema registered elsewhere applied before CacheFor: %v", err)
	}
	now = now.Add(schema.CacheFor + time.Second)
	if err := push("free.form", `[1]`, ""); status(err) != 422 || ojserr.As(err).Code != ojserr.SchemaValidation {
		t.Fatalf("after CacheFor: %v, want 422 schema_validation", err)
	}
	if err := push("typed.job", `[1,2]`, ""); err != nil {
		t.Fatalf("latest (numbers): %v", err)
	}
	if err := push("typed.job", `["a"]`, ""); status(err) != 422 {
		t.Fatalf("strings against the latest: %v", err)
	}
	if err := push("typed.job", `["a"]`, "1"); err != nil {
		t.Fatalf("strings against version 1: %v", err)
	}
	if err := push("typed.job", `[1]`, "1"); status(err) != 422 {
		t.Fatalf("numbers against version 1: %v", err)
	}
	if err := push("typed.job", `[1]`, "9"); err != nil {
		t.Fatalf("an unregistered version falls back to the latest: %v", err)
	}
}
