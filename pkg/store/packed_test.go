package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
	"github.com/ojs-aws/ojs-serverless/pkg/store"
)

// TestPackedKeepsSmallTextAsAStringAndCompressesLargeText: text under a
// write unit stays a string attribute (what every item held before
// packing, and still reads); large JSON becomes a much smaller binary
// attribute, random base64 one about three quarters its size; each reads back
// exactly; a binary attribute that is not gzip is an error, not garbage.
func TestPackedKeepsSmallTextAsAStringAndCompressesLargeText(t *testing.T) {
	t.Parallel()
	largeJSON := "[" + strings.Repeat(`{"account":"DE89370400440532013000","amount":"125.00","currency":"EUR"},`, 14000) + "1]"
	for _, tc := range []struct {
		name   string
		text   string
		binary bool
		under  int // the stored attribute's most bytes, when binary
	}{
		{"empty", "", false, 0},
		{"small", `[1,"two",{"x":3.25}]`, false, 0},
		{"just under a unit", "[\"" + strings.Repeat("a", 1000) + "\"]", false, 0},
		{"a few KB of JSON", "[" + strings.Repeat(`{"k":"value","n":12345},`, 200) + "0]", true, 1 << 10},
		{"a MiB of JSON", largeJSON, true, len(largeJSON) / 20},
		{"random base64", `["` + testenv.RandomText(200<<10, 3) + `"]`, true, 160 << 10},
	} {
		av, err := attributevalue.Marshal(store.Packed(tc.text))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, isBinary := av.(*types.AttributeValueMemberB)
		if isBinary != tc.binary {
			t.Fatalf("%s: stored as %T", tc.name, av)
		}
		if isBinary && len(b.Value) > tc.under {
			t.Fatalf("%s: %d bytes stored, want at most %d", tc.name, len(b.Value), tc.under)
		}
		var back store.Packed
		if err := attributevalue.Unmarshal(av, &back); err != nil || string(back) != tc.text {
			t.Fatalf("%s: read back %d bytes (want %d): %v", tc.name, len(back), len(tc.text), err)
		}
	}
	var p store.Packed
	if err := p.UnmarshalDynamoDBAttributeValue(&types.AttributeValueMemberB{Value: []byte("not gzip")}); err == nil {
		t.Fatal("a binary attribute that is not gzip read without an error")
	}
	if err := p.UnmarshalDynamoDBAttributeValue(&types.AttributeValueMemberNULL{Value: true}); err != nil || p != "" {
		t.Fatalf("NULL: %q %v", p, err)
	}
}

// TestAMiBEnvelopeIsStoredCompressedAndReadsBackExactly: a job of 1 MiB
// of JSON args (ojs-json-format.md 8.1: every implementation accepts
// envelopes up to 1 MiB) is written to DynamoDB Local, whose items hold
// at most 400 KB, with its args as a compressed binary attribute; it
// reads back, by key and from a claim's answer, byte for byte; its ACK's
// result is packed too.
func TestAMiBEnvelopeIsStoredCompressedAndReadsBackExactly(t *testing.T) {
	t.Parallel()
	s, _ := testenv.Table(t)
	ctx := context.Background()
	var b strings.Builder
	b.WriteString(`{"type":"ledger.import","args":[[`)
	for i := 0; b.Len() < job.MaxEnvelopeBytes-200; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"entry":%d,"account":"DE%020d","amount":"%d.%02d"}`, i, i*7919, i%5000, i%100)
	}
	b.WriteString(`]],"options":{"queue":"big"}}`)
	body := b.String()
	if len(body) <= 1<<20-1024 || len(body) > job.MaxEnvelopeBytes {
		t.Fatalf("envelope of %d bytes", len(body))
	}
	j := newJob(t, body, t0)
	n, err := store.CheckJobItem(j, time.Minute)
	if err != nil || n > 400<<10/2 {
		t.Fatalf("stored size %d: %v", n, err)
	}
	if err := s.Create(ctx, []*job.Job{j}, time.Minute); err != nil {
		t.Fatal(err)
	}
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "JOB#" + j.ID}, "sk": &types.AttributeValueMemberS{Value: "JOB"}}
	raw, err := testenv.DynamoDB().GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Item["args"].(*types.AttributeValueMemberB); !ok {
		t.Fatalf("args stored as %T", raw.Item["args"])
	}
	got, err := s.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Args) != string(j.Args) {
		t.Fatalf("args read back differ: %d bytes, want %d", len(got.Args), len(j.Args))
	}
	now := t0.Add(time.Second)
	claimed, err := s.Apply(ctx, store.Claim(j.ID, store.ClaimOpts{Queue: "big", WorkerID: "w", Now: now, LeaseUntil: now.Add(time.Minute), Deadline: now.Add(time.Hour)}))
	if err != nil {
		t.Fatal(err)
	}
	if string(claimed.Args) != string(j.Args) || !json.Valid(claimed.Args) {
		t.Fatalf("claimed args differ: %d bytes", len(claimed.Args))
	}
	// Its result of 60 KiB of JSON is packed by the ACK's update too.
	result := json.RawMessage(`{"imported":[` + strings.Repeat(`{"ok":true,"ref":"TX-000000000"},`, 1900) + `{}]}`)
	if _, err := s.Apply(ctx, store.Complete(j.ID, result, claimed.Attempt, now.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	raw, err = testenv.DynamoDB().GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()), Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := raw.Item["result"].(*types.AttributeValueMemberB); !ok || len(r.Value) > len(result)/10 {
		t.Fatalf("result stored as %T", raw.Item["result"])
	}
	done, err := s.Get(ctx, j.ID)
	if err != nil || done.State != job.Completed || string(done.Result) != string(result) {
		t.Fatalf("completed job: %v, result of %d bytes (want %d), %v", done.State, len(done.Result), len(result), err)
	}
}

// TestAJobThatDoesNotCompressEnoughIsRefusedBeforeWriting: random data
// past store.MaxJobItemBytes (as stored) is a TooLargeError naming the
// stored size, so that its ACKs and FAILs could never pass 400 KB.
func TestAJobThatDoesNotCompressEnoughIsRefusedBeforeWriting(t *testing.T) {
	t.Parallel()
	j := newJob(t, `{"type":"blob.put","args":["`+testenv.RandomText(600<<10, 9)+`"]}`, t0)
	n, err := store.CheckJobItem(j, time.Minute)
	var tl *store.TooLargeError
	if !asTooLarge(err, &tl) || tl.What != "job" || tl.Bytes != n || n <= store.MaxJobItemBytes || tl.Max != store.MaxJobItemBytes {
		t.Fatalf("CheckJobItem: %d %v", n, err)
	}
}

func asTooLarge(err error, tl **store.TooLargeError) bool {
	e, ok := err.(*store.TooLargeError)
	*tl = e
	return ok
}

// BenchmarkPacked prints what packing costs and saves on a job's args: a
// few KB of JSON and 1 MiB of it (stored bytes per op as "stored-B").
func BenchmarkPacked(b *testing.B) {
	for _, tc := range []struct {
		name string
		rows int
	}{{"3KB", 40}, {"1MiB", 14000}} {
		var sb strings.Builder
		sb.WriteString("[")
		for i := 0; i < tc.rows; i++ {
			fmt.Fprintf(&sb, `{"entry":%d,"account":"DE%020d","amount":"%d.%02d"},`, i, i*7919, i%5000, i%100)
		}
		sb.WriteString("0]")
		text := store.Packed(sb.String())
		b.Run("marshal/"+tc.name, func(b *testing.B) {
			var stored int
			for b.Loop() {
				av, err := attributevalue.Marshal(text)
				if err != nil {
					b.Fatal(err)
				}
				stored = len(av.(*types.AttributeValueMemberB).Value)
			}
			b.ReportMetric(float64(len(text)), "text-B")
			b.ReportMetric(float64(stored), "stored-B")
		})
		av, _ := attributevalue.Marshal(text)
		b.Run("unmarshal/"+tc.name, func(b *testing.B) {
			for b.Loop() {
				var back store.Packed
				if err := attributevalue.Unmarshal(av, &back); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPlainWritesKeepPayloadsReadableByEarlierVersions: with plain writes
// (OJS_PLAIN_PAYLOADS, the first deploy over a stack whose functions
// predate packing) large text is written as a string, which earlier
// versions read, and packed text written before still reads. Not
// parallel: the switch is the process's.
func TestPlainWritesKeepPayloadsReadableByEarlierVersions(t *testing.T) {
	text := store.Packed("[" + strings.Repeat(`{"k":"value","n":12345},`, 200) + "0]")
	packed, err := attributevalue.Marshal(text)
	if err != nil {
		t.Fatal(err)
	}
	store.SetPlainWrites(true)
	defer store.SetPlainWrites(false)
	av, err := attributevalue.Marshal(text)
	if s, ok := av.(*types.AttributeValueMemberS); err != nil || !ok || s.Value != string(text) {
		t.Fatalf("plain write: %T %v", av, err)
	}
	var back store.Packed
	if _, ok := packed.(*types.AttributeValueMemberB); !ok || attributevalue.Unmarshal(packed, &back) != nil || back != text {
		t.Fatalf("a packed attribute written before (%T) does not read back", packed)
	}
	// A job that fits only compressed is then refused before writing.
	j := newJob(t, `{"type":"a.b","args":[`+strings.Repeat(`{"entry":1,"amount":"12.50"},`, 15000)+`0]}`, t0)
	if _, err := store.CheckJobItem(j, time.Minute); err == nil {
		t.Fatal("a job of 400 KB of args fit uncompressed")
	}
	store.SetPlainWrites(false)
	if _, err := store.CheckJobItem(j, time.Minute); err != nil {
		t.Fatalf("packed, it fits: %v", err)
	}
}
