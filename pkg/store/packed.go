package store

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Packed is text (a job's args, meta, result or parent_results, a workflow
// step's job request and compensation, a cron template) stored
// gzip-compressed as a binary attribute when it is longer than packMin and
// compressing it saves at least packGain bytes, and as a string otherwise. It is what lets a job envelope of 1 MiB
// (ojs-json-format.md 8.1) fit a DynamoDB item of 400 KB, and it makes a
// job with a few KB of JSON args take fewer write units on every write
// (DynamoDB bills each write by the item's size, per KB).
//
// Reading accepts both forms, so items written before packing existed (or
// below the threshold) read as they always did. Decoding happens where an
// item becomes a value (attributevalue.UnmarshalMap, from a read or a
// stream image); nothing reads a packed attribute inside an expression.
type Packed string

const (
	// packMin is the length from which text is compressed: below one
	// write unit (1 KB) compressing cannot save a unit.
	packMin = 1 << 10
	// packGain is the least saving for which the compressed form is kept.
	packGain = 64
	// maxUnpacked bounds what a packed attribute may expand to (a guard:
	// only this package writes them, and nothing it writes is larger).
	maxUnpacked = 8 << 20
)

// gzipWriters holds writers for reuse. BestSpeed: on ledger JSON it packs
// 943 KiB into 146 KiB in 4 ms where the default level takes 10 ms for
// 135 KiB, and 2.5 KB into the same 485 bytes in half the time
// (BenchmarkPacked).
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return w
}}

// plainWrites turns packing off for what this process writes
// (SetPlainWrites); reads accept both forms either way.
var plainWrites atomic.Bool

// SetPlainWrites makes this process write packed text as plain strings
// (OJS_PLAIN_PAYLOADS): for the first deploy of this version over a stack
// that ran an earlier one, whose functions cannot read a packed attribute
// and run beside this version during a canary, or after a rollback. A job
// that then does not fit store.MaxJobItemBytes uncompressed is refused.
func SetPlainWrites(plain bool) { plainWrites.Store(plain) }

// MarshalDynamoDBAttributeValue implements attributevalue.Marshaler.
func (p Packed) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	if len(p) < packMin || plainWrites.Load() {
		return &types.AttributeValueMemberS{Value: string(p)}, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(p) / 4)
	w := gzipWriters.Get().(*gzip.Writer)
	w.Reset(&buf)
	_, err := io.WriteString(w, string(p))
	if err == nil {
		err = w.Close()
	}
	gzipWriters.Put(w)
	if err != nil {
		return nil, fmt.Errorf("pack: %w", err)
	}
	if buf.Len()+packGain > len(p) {
		return &types.AttributeValueMemberS{Value: string(p)}, nil
	}
	return &types.AttributeValueMemberB{Value: buf.Bytes()}, nil
}

// UnmarshalDynamoDBAttributeValue implements attributevalue.Unmarshaler.
func (p *Packed) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	switch v := av.(type) {
	case *types.AttributeValueMemberS:
		*p = Packed(v.Value)
	case *types.AttributeValueMemberNULL:
		*p = ""
	case *types.AttributeValueMemberB:
		s, err := unpack(v.Value)
		if err != nil {
			return err
		}
		*p = Packed(s)
	default:
		return fmt.Errorf("unpack: unexpected attribute type %T", av)
	}
	return nil
}

// errPackedTooLarge is a packed attribute expanding past maxUnpacked.
var errPackedTooLarge = errors.New("unpack: packed text expands past its bound")

// gzipReaders holds readers for reuse: a new one allocates its window.
var gzipReaders sync.Pool

func unpack(b []byte) (string, error) {
	r, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if r == nil {
		r, err = gzip.NewReader(bytes.NewReader(b))
	} else {
		err = r.Reset(bytes.NewReader(b))
	}
	if err != nil {
		return "", fmt.Errorf("unpack: %w", err)
	}
	defer gzipReaders.Put(r)
	out, err := io.ReadAll(io.LimitReader(r, maxUnpacked+1))
	if err != nil {
		return "", fmt.Errorf("unpack: %w", err)
	}
	if len(out) > maxUnpacked {
		return "", errPackedTooLarge
	}
	return string(out), nil
}
