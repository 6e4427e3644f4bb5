// Package schema is the schema registry (urn:ojs:ext:schema-registry):
// versioned JSON Schemas for the args of a job type, stored in the job
// table, and the validation of a PUSH's args against them.
package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Limits of a registered schema.
const (
	MaxSchemaBytes = 64 << 10
	MaxVersion     = 1_000_000
)

// CacheFor is how long a process keeps the versions of a job type it read
// to validate PUSHes: a schema registered or deleted takes effect in every
// api function within it.
const CacheFor = 30 * time.Second

// Version is one registered schema: pk SCHEMA#<type>, sk V#<version,
// zero-padded>, one partition per type (its versions are one query).
type Version struct {
	Type      string          `json:"type" dynamodbav:"type"`
	Version   int             `json:"version" dynamodbav:"version"`
	Schema    json.RawMessage `json:"schema" dynamodbav:"-"`
	Text      string          `json:"-" dynamodbav:"schema"`
	CreatedAt string          `json:"created_at" dynamodbav:"created_at"`
}

// Registry registers, reads and deletes schemas and validates args.
type Registry struct {
	db    store.DynamoAPI
	table string
	now   func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	at       time.Time
	versions []Version // ascending
	compiled map[int]*jsonschema.Schema
}

// New returns the registry on table; now defaults to time.Now.
func New(db store.DynamoAPI, table string, now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	return &Registry{db: db, table: table, now: now, cache: map[string]cached{}}
}

func key(typ string, version int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"pk": store.AttrS("SCHEMA#" + typ), "sk": store.AttrS(fmt.Sprintf("V#%07d", version))}
}

// check validates a type and a version number from a path.
func check(typ, version string) (int, error) {
	if err := job.ValidateType(typ); err != nil {
		return 0, err
	}
	if version == "" {
		return 0, nil
	}
	v, err := strconv.Atoi(version)
	if err != nil || v < 1 || v > MaxVersion {
		return 0, ojserr.Invalid("version", "The version must be a whole number from 1 to %d.", MaxVersion)
	}
	return v, nil
}

// compile compiles a schema document: JSON Schema draft 7 unless its
// "$schema" names another draft (the positional args of a job are
// usually described with draft 7's tuple "items", which draft 2020-12
// spells "prefixItems").
func compile(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource("args.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("args.json")
}

// Register stores schema as version of typ. Registering the same schema
// again is idempotent (created false); a different one under a version
// that exists is a 409.
func (r *Registry) Register(ctx context.Context, typ, version string, schema json.RawMessage) (v Version, created bool, err error) {
	n, err := check(typ, version)
	if err != nil {
		return Version{}, false, err
	}
	if len(bytes.TrimSpace(schema)) == 0 || string(schema) == "null" {
		return Version{}, false, ojserr.Invalid("schema", "The 'schema' field is required: a JSON Schema.")
	}
	if len(schema) > MaxSchemaBytes {
		return Version{}, false, ojserr.Invalid("schema", "A schema is at most %d bytes.", MaxSchemaBytes)
	}
	if _, err := compile(schema); err != nil {
		return Version{}, false, ojserr.Invalid("schema", "The schema does not compile: %v", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, schema); err != nil {
		return Version{}, false, ojserr.Invalid("schema", "The schema is not valid JSON.")
	}
	v = Version{Type: typ, Version: n, Text: buf.String(), Schema: buf.Bytes(), CreatedAt: job.Timestamp(r.now())}
	item, err := attributevalue.MarshalMap(v)
	if err != nil {
		return Version{}, false, err
	}
	maps.Copy(item, key(typ, n))
	_, err = r.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &r.table, Item: item, ConditionExpression: aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	if ccf, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		var old Version
		if attributevalue.UnmarshalMap(ccf.Item, &old) == nil && old.Text == v.Text {
			old.Schema = json.RawMessage(old.Text)
			return old, false, nil
		}
		return Version{}, false, ojserr.StateConflict(ojserr.Duplicate, "Version %d of %s is registered with another schema; register a new version.", n, typ)
	}
	if err != nil {
		return Version{}, false, ojserr.Backend(err)
	}
	r.forget(typ)
	return v, true, nil
}

// Versions lists the registered versions of typ, oldest first.
func (r *Registry) Versions(ctx context.Context, typ string) ([]Version, error) {
	if _, err := check(typ, ""); err != nil {
		return nil, err
	}
	out, err := store.QueryAll[Version](ctx, r.db, &dynamodb.QueryInput{TableName: &r.table, ConsistentRead: aws.Bool(true),
		KeyConditionExpression: aws.String("pk = :pk"), ExpressionAttributeValues: map[string]types.AttributeValue{":pk": store.AttrS("SCHEMA#" + typ)}})
	if err != nil {
		return nil, ojserr.Backend(err)
	}
	for i := range out {
		out[i].Schema = json.RawMessage(out[i].Text)
	}
	return out, nil
}

// Get returns version of typ, or its latest when version is "".
func (r *Registry) Get(ctx context.Context, typ, version string) (Version, error) {
	n, err := check(typ, version)
	if err != nil {
		return Version{}, err
	}
	vs, err := r.Versions(ctx, typ)
	if err != nil {
		return Version{}, err
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if n == 0 || vs[i].Version == n {
			return vs[i], nil
		}
	}
	return Version{}, ojserr.NotFoundf("schema", typ+"/"+version)
}

// Delete removes version of typ (404 when it is not registered). Jobs
// pushed meanwhile are validated against the versions left.
func (r *Registry) Delete(ctx context.Context, typ, version string) error {
	n, err := check(typ, version)
	if err != nil {
		return err
	}
	_, err = r.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &r.table, Key: key(typ, n), ConditionExpression: aws.String("attribute_exists(pk)")})
	if _, ok := errors.AsType[*types.ConditionalCheckFailedException](err); ok {
		return ojserr.NotFoundf("schema", typ+"/"+version)
	}
	if err != nil {
		return ojserr.Backend(err)
	}
	r.forget(typ)
	return nil
}

func (r *Registry) forget(typ string) {
	r.mu.Lock()
	delete(r.cache, typ)
	r.mu.Unlock()
}

// Validate checks j's args against the schema of its type: the version
// its envelope names ("version", the job-versioning extension) when that
// is registered, else the latest. A type with no schema passes. The
// versions of a type are read at most once per CacheFor per process.
func (r *Registry) Validate(ctx context.Context, j *job.Job) error {
	r.mu.Lock()
	c, ok := r.cache[j.Type]
	r.mu.Unlock()
	if !ok || r.now().Sub(c.at) > CacheFor {
		vs, err := r.Versions(ctx, j.Type)
		if err != nil {
			return err
		}
		c = cached{at: r.now(), versions: vs, compiled: map[int]*jsonschema.Schema{}}
	}
	if len(c.versions) == 0 {
		r.store(j.Type, c)
		if strict(j) {
			return ojserr.Newf(ojserr.SchemaValidation, "meta.ojs_validate asks for the args of this job to be validated, and job type '%s' has no registered schema.", j.Type).
				With("type", j.Type).With("field", "meta.ojs_validate")
		}
		return nil
	}
	v := c.versions[len(c.versions)-1]
	var want int
	if raw, ok := j.Extra["version"]; ok && json.Unmarshal(raw, &want) == nil {
		for _, cand := range c.versions {
			if cand.Version == want {
				v = cand
			}
		}
	}
	sch := c.compiled[v.Version]
	if sch == nil {
		var err error
		if sch, err = compile(v.Schema); err != nil {
			return ojserr.Backend(err)
		}
		c.compiled[v.Version] = sch
	}
	r.store(j.Type, c)
	args, err := jsonschema.UnmarshalJSON(bytes.NewReader(j.Args))
	if err == nil {
		err = sch.Validate(args)
	}
	if err != nil {
		return ojserr.New(ojserr.SchemaValidation, fmt.Sprintf("The args do not match version %d of the schema of %s: %v", v.Version, j.Type, err)).
			With("type", j.Type).With("schema_version", v.Version)
	}
	return nil
}

func (r *Registry) store(typ string, c cached) {
	r.mu.Lock()
	r.cache[typ] = c
	r.mu.Unlock()
}

// StrictMetaKey is the meta key by which a producer asks for its job's
// args to be validated: true refuses the job when its type has no
// registered schema (a job without it is validated only when one exists).
const StrictMetaKey = "ojs_validate"

// strict reports whether j's meta sets StrictMetaKey to true.
func strict(j *job.Job) bool {
	var m struct {
		Validate bool `json:"ojs_validate"`
	}
	return len(j.Meta) > 0 && json.Unmarshal(j.Meta, &m) == nil && m.Validate
}
