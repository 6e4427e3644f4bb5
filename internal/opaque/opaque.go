// Package opaque encodes the state of a paged operation as an opaque
// cursor: JSON in unpadded base64url, safe in a query string.
package opaque

import (
	"encoding/base64"
	"encoding/json"
)

// MaxLen bounds the cursors Decode accepts.
const MaxLen = 16384

// Encode returns v as a cursor.
func Encode(v any) string {
	b, _ := json.Marshal(v) // cursor states are plain structs
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads cursor s into v; false if it is not one Encode made.
func Decode(s string, v any) bool {
	if len(s) > MaxLen {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && json.Unmarshal(b, v) == nil
}
