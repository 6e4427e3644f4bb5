package store

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
	"github.com/ojs-aws/ojs-serverless/pkg/job"
)

// ItemBytes is the size DynamoDB counts for an item against its 400 KB
// item and 4 MB transaction limits, by DynamoDB's published rules (rounded
// up where they are approximate).
func ItemBytes(item map[string]types.AttributeValue) int {
	n := 0
	for k, v := range item {
		n += len(k) + valueBytes(v)
	}
	return n
}

func valueBytes(v types.AttributeValue) int {
	switch t := v.(type) {
	case *types.AttributeValueMemberS:
		return len(t.Value)
	case *types.AttributeValueMemberN:
		return numberBytes(t.Value)
	case *types.AttributeValueMemberB:
		return len(t.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		return sumOf(t.Value, func(s string) int { return len(s) })
	case *types.AttributeValueMemberNS:
		return sumOf(t.Value, numberBytes)
	case *types.AttributeValueMemberBS:
		return sumOf(t.Value, func(b []byte) int { return len(b) })
	case *types.AttributeValueMemberL:
		return 3 + sumOf(t.Value, func(e types.AttributeValue) int { return 1 + valueBytes(e) })
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range t.Value {
			n += 1 + len(k) + valueBytes(e)
		}
		return n
	}
	return 0
}

func numberBytes(s string) int { return (len(s)+1)/2 + 1 }

func sumOf[T any](vs []T, f func(T) int) (n int) {
	for _, v := range vs {
		n += f(v)
	}
	return n
}

// JobItemBytes is ItemBytes of the item Create writes for j.
func JobItemBytes(j *job.Job, redeliverAfter time.Duration) (int, error) {
	p, err := (&Store{}).JobPut(j, redeliverAfter)
	if err != nil {
		return 0, err
	}
	return ItemBytes(p.Item), nil
}

// MaxJobItemBytes is the most a job's item may take when the job is
// created: DynamoDB's 400 KB less what its attempts may add later (the
// largest result, the error history and the current error) and a margin.
// Args and meta count as stored (Packed).
const MaxJobItemBytes = awslimit.DynamoItemBytes - MaxPackedResultBytes - job.MaxErrorHistoryBytes - job.MaxErrorBytes - 4<<10

// MaxPackedResultBytes bounds a result as stored (Packed).
const MaxPackedResultBytes = 64 << 10

// PackedBytes is the size text takes stored as Packed.
func PackedBytes(text []byte) int {
	av, err := Packed(text).MarshalDynamoDBAttributeValue()
	if b, ok := av.(*types.AttributeValueMemberB); ok && err == nil {
		return len(b.Value)
	}
	return len(text)
}

// ListBytes bounds the FetchBytes of the jobs one page of whole jobs
// holds (at least one), so that it fits Lambda's 6 MB response.
const ListBytes = 4 << 20

// TrimToBytes keeps items from the start while their FetchBytes stay
// within budget (the first always); trimmed reports whether it cut.
func TrimToBytes(items []Item, budget int) (kept []Item, trimmed bool) {
	total := 0
	for i, it := range items {
		total += it.FetchBytes
		if i > 0 && total > budget {
			return items[:i], true
		}
	}
	return items, false
}

// CheckJobItem returns the size of the item Create writes for j, and a
// *TooLargeError (What "job") when it passes MaxJobItemBytes.
func CheckJobItem(j *job.Job, redeliverAfter time.Duration) (int, error) {
	n, err := JobItemBytes(j, redeliverAfter)
	if err != nil {
		return 0, err
	}
	if n > MaxJobItemBytes {
		return n, &TooLargeError{What: "job", Bytes: n, Max: MaxJobItemBytes}
	}
	return n, nil
}

// TooLargeError is returned, before anything is written, for a write
// DynamoDB would refuse for its size: an item over awslimit.DynamoItemBytes
// or a transaction whose items pass awslimit.DynamoTxBytes.
type TooLargeError struct {
	// What is "item" (DynamoDB's limit), "job" (MaxJobItemBytes) or
	// "transaction".
	What string
	// Bytes is the size as DynamoDB counts it (ItemBytes); Max the limit.
	Bytes, Max int
	// Index is the offending job's position, for an item.
	Index int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s of %d bytes exceeds DynamoDB's %d", e.What, e.Bytes, e.Max)
}

// checkSizes refuses puts DynamoDB would refuse for their size.
func checkSizes(puts []*types.Put) error {
	total := 0
	for i, p := range puts {
		n := ItemBytes(p.Item)
		if n > awslimit.DynamoItemBytes {
			return &TooLargeError{What: "item", Bytes: n, Max: awslimit.DynamoItemBytes, Index: i}
		}
		total += n
	}
	if len(puts) > 1 && total > awslimit.DynamoTxBytes {
		return &TooLargeError{What: "transaction", Bytes: total, Max: awslimit.DynamoTxBytes}
	}
	return nil
}

// FetchSlack covers what a claim adds to a job as last written before it
// (state, attempt, started_at and the other timestamps of the attempt).
const FetchSlack = 512

// FetchBytes is what job j, once claimed, adds to the FETCH answer: its
// OJS JSON as a JSON string inside the Lambda response, plus FetchSlack.
// Writes store it on the job as "fb", which the ready index projects.
func FetchBytes(j *job.Job) int {
	b, err := json.Marshal(j)
	if err != nil {
		return 0
	}
	return awslimit.JSONStringLen(b) + FetchSlack
}
