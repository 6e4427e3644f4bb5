// Package awslimit holds the AWS service limits the product sizes its
// requests, responses, messages and items against, in one place, so that the
// code that builds a payload and the local runtime that checks it agree
// (shared/DESIGN.md rule 8: what passes locally must pass on AWS). Each value
// is the strictest current AWS limit this product stays under, not a
// configurable setting.
package awslimit

import "unicode/utf8"

const (
	// LambdaRequestBytes is the largest synchronous Lambda invocation
	// payload (the event): 6 MiB. Lambda refuses a larger one with
	// RequestEntityTooLargeException before the function runs.
	LambdaRequestBytes = 6 << 20
	// LambdaResponseBytes is the largest synchronous Lambda response:
	// 6 MiB and 100 bytes. A larger one fails the invocation
	// (Function.ResponseSizeTooLarge) after the function ran.
	LambdaResponseBytes = 6<<20 + 100
	// SQSMessageBytes is the largest SQS message (body plus message
	// attributes) this product sends and the size its queues are
	// configured to accept: 256 KiB, SQS's limit until 2025. SQS now takes
	// 1 MiB; the product keeps the older limit so that messages stay
	// portable to every SQS-compatible queue and emulator.
	SQSMessageBytes = 256 << 10
	// SQSBatchBytes bounds one SendMessageBatch request (all entries
	// together), at the same 256 KiB.
	SQSBatchBytes = 256 << 10
	// DynamoItemBytes is DynamoDB's item size limit: 400 KB (409,600
	// bytes), attribute names included.
	DynamoItemBytes = 400 << 10
	// DynamoTxBytes is DynamoDB's limit on the aggregate size of the items
	// of one transaction: 4 MB (DynamoDB Local enforces 4 MiB; the
	// stricter decimal reading is used).
	DynamoTxBytes = 4_000_000
	// DynamoTxItems is the most items one DynamoDB transaction holds.
	DynamoTxItems = 100
)

// JSONStringLen returns the length of s once encoded as a JSON string by
// encoding/json (quotes included): what a JSON document costs when it is
// carried as a string inside another, as the body of an API Gateway
// response or the message of an SQS event. encoding/json escapes '"', '\\',
// control characters, '<', '>', '&', U+2028, U+2029 and invalid UTF-8.
func JSONStringLen(s []byte) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 6 // \ufffd
		case r == '\u2028' || r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}
