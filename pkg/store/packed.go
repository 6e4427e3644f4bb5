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

// Packed is text (args, meta, a result, parent_results, a step's job
// request, a cron template) stored gzip-compressed as a binary attribute
// when it is at least packMin long and that saves packGain bytes, and as a
// string otherwise: it lets a 1 MiB envelope fit a 400 KB item and saves
// write units. Reading accepts both forms.
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

// gzipWriters holds writers for reuse, at BestSpeed (BenchmarkPacked: about
// the default level's size in less than half its time).
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return w
}}

// plainWrites turns packing off for what this process writes
// (SetPlainWrites); reads accept both forms either way.
var plainWrites atomic.Bool

// SetPlainWrites makes this process write packed text as plain strings
// (OJS_PLAIN_PAYLOADS), for a deploy over functions that cannot read a
// packed attribute.
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
