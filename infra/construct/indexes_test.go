package ojsconstruct

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
)

// indexRecordFile records the global secondary indexes as deployed: what
// the next update starts from.
const indexRecordFile = "testdata/indexes.json"

// indexRecord is one global secondary index of one table.
type indexRecord struct {
	Table      string   `json:"table"` // the table's logical id
	Index      string   `json:"index"`
	Keys       []string `json:"keys"` // "<attribute> <HASH|RANGE> <S|N|B>"
	Projection string   `json:"projection"`
	NonKey     []string `json:"non_key_attributes,omitempty"`
}

func indexRecords(table string, gsis []types.GlobalSecondaryIndex, attrs map[string]string) []indexRecord {
	var out []indexRecord
	for _, g := range gsis {
		r := indexRecord{Table: table, Index: aws.ToString(g.IndexName), Projection: string(g.Projection.ProjectionType), NonKey: g.Projection.NonKeyAttributes}
		for _, k := range g.KeySchema {
			r.Keys = append(r.Keys, fmt.Sprintf("%s %s %s", aws.ToString(k.AttributeName), k.KeyType, attrs[aws.ToString(k.AttributeName)]))
		}
		out = append(out, r)
	}
	return out
}

// templateIndexes reads every table's indexes out of a template.
func templateIndexes(t *testing.T, s *synthesized) []indexRecord {
	t.Helper()
	var out []indexRecord
	for _, id := range sortedKeys(s.resources("AWS::DynamoDB::Table")) {
		var p struct {
			AttributeDefinitions   []types.AttributeDefinition
			GlobalSecondaryIndexes []types.GlobalSecondaryIndex
		}
		raw, _ := json.Marshal(props(s.resources("AWS::DynamoDB::Table")[id]))
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		attrs := map[string]string{}
		for _, a := range p.AttributeDefinitions {
			attrs[aws.ToString(a.AttributeName)] = string(a.AttributeType)
		}
		out = append(out, indexRecords(id, p.GlobalSecondaryIndexes, attrs)...)
	}
	return out
}

// TestIndexEvolution guards what CloudFormation cannot do to a table in
// one update: change an existing index's keys or projection, or add or
// remove more than one index. The synthesised indexes of every
// environment must equal the committed record, and a difference says
// which rule it breaks.
func TestIndexEvolution(t *testing.T) {
	raw, err := os.ReadFile(indexRecordFile)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []indexRecord
	if err := json.Unmarshal(raw, &recorded); err != nil {
		t.Fatalf("%s: %v", indexRecordFile, err)
	}
	for _, env := range []string{"dev", "staging", "prod"} {
		got := templateIndexes(t, synthEnv(t, env))
		if msg := indexChange(recorded, got); msg != "" {
			want, _ := json.MarshalIndent(got, "", "  ")
			t.Errorf("%s: %s\nThe synthesised indexes are:\n%s", env, msg, want)
		}
	}
}

// TestLocalTableIndexes: the local stack's table (emulator.EnsureTable)
// has the same indexes as the deployed one.
func TestLocalTableIndexes(t *testing.T) {
	admin := &tableAdmin{}
	if _, err := emulator.EnsureTable(context.Background(), admin, "ojs"); err != nil {
		t.Fatal(err)
	}
	attrs := map[string]string{}
	for _, a := range admin.in.AttributeDefinitions {
		attrs[aws.ToString(a.AttributeName)] = string(a.AttributeType)
	}
	deployed := templateIndexes(t, synthEnv(t, "dev"))
	local := indexRecords(deployed[0].Table, admin.in.GlobalSecondaryIndexes, attrs)
	if !reflect.DeepEqual(local, deployed) {
		t.Errorf("local table indexes %+v, deployed %+v", local, deployed)
	}
}

// indexChange describes how got differs from recorded, or returns "".
func indexChange(recorded, got []indexRecord) string {
	key := func(r indexRecord) string { return r.Table + "/" + r.Index }
	old := map[string]indexRecord{}
	for _, r := range recorded {
		old[key(r)] = r
	}
	var changed, added, removed []string
	for _, r := range got {
		if o, ok := old[key(r)]; !ok {
			added = append(added, key(r))
		} else if !reflect.DeepEqual(o, r) {
			changed = append(changed, key(r))
		}
		delete(old, key(r))
	}
	for k := range old {
		removed = append(removed, k)
	}
	slices.Sort(removed)
	const how = " (docs/infrastructure.md, \"Changing an index\")"
	switch {
	case len(changed) > 0:
		return fmt.Sprintf("indexes %v changed their keys or projection: CloudFormation cannot update an existing index; "+
			"add a new index under a new name, backfill, switch the reads, then drop the old one"+how, changed)
	case len(added)+len(removed) > 1:
		return fmt.Sprintf("one update adds %v and removes %v: CloudFormation adds or removes one index per update; "+
			"ship one index per deploy"+how, added, removed)
	case len(added)+len(removed) == 1:
		return fmt.Sprintf("index %v added, %v removed: one index per deploy is fine; update %s in the same commit "+
			"(it records what the next deploy starts from)", added, removed, indexRecordFile)
	}
	return ""
}

func TestIndexChange(t *testing.T) {
	t.Parallel()
	a := indexRecord{Table: "T", Index: "a", Keys: []string{"a_pk HASH S"}, Projection: "ALL"}
	b := indexRecord{Table: "T", Index: "b", Keys: []string{"b_pk HASH S"}, Projection: "KEYS_ONLY"}
	c := indexRecord{Table: "T", Index: "c", Keys: []string{"c_pk HASH S"}, Projection: "KEYS_ONLY"}
	a2 := a
	a2.Keys = []string{"a_pk HASH N"}
	for _, tc := range []struct {
		name      string
		old, next []indexRecord
		want      string
	}{
		{"same", []indexRecord{a, b}, []indexRecord{b, a}, ""},
		{"keys changed", []indexRecord{a}, []indexRecord{a2}, "cannot update an existing index"},
		{"two added", []indexRecord{a}, []indexRecord{a, b, c}, "one index per deploy"},
		{"one swapped", []indexRecord{a, b}, []indexRecord{a, c}, "one index per deploy"},
		{"one added", []indexRecord{a}, []indexRecord{a, b}, "in the same commit"},
		{"one removed", []indexRecord{a, b}, []indexRecord{a}, "in the same commit"},
	} {
		got := indexChange(tc.old, tc.next)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// tableAdmin answers EnsureTable's calls and keeps the CreateTable input.
type tableAdmin struct{ in *dynamodb.CreateTableInput }

func (a *tableAdmin) CreateTable(_ context.Context, in *dynamodb.CreateTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	a.in = in
	return &dynamodb.CreateTableOutput{}, nil
}

func (a *tableAdmin) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{Table: &types.TableDescription{TableStatus: types.TableStatusActive}}, nil
}

func (a *tableAdmin) UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	return &dynamodb.UpdateTimeToLiveOutput{}, nil
}
