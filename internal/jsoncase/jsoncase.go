// Package jsoncase decodes JSON into Go structs with case-sensitive field
// names. encoding/json matches object keys to struct fields ignoring case,
// so {"Type": "x"} would set the field tagged "type"; OJS names are
// case-sensitive (JSON Schema semantics), so such a key is an unknown
// field: left out of the decoding (the caller may still preserve it).
package jsoncase

import (
	"bytes"
	"cmp"
	"encoding/json"
	"reflect"
	"strings"
)

// Unmarshal is json.Unmarshal, except that object keys matching a struct
// field only when case is ignored are dropped, at every level a struct
// type describes. Errors are json.Unmarshal's.
func Unmarshal(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return json.Unmarshal(data, v)
	}
	if out, changed := filter(data, t.Elem()); changed {
		data = out
	}
	return json.Unmarshal(data, v)
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// filter returns raw without the case-mismatched keys of the objects t
// describes, and whether it changed anything.
func filter(raw []byte, t reflect.Type) ([]byte, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		return raw, false
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &obj) != nil {
			return raw, false // not an object: json.Unmarshal reports it
		}
		fields := names(t)
		changed := false
		for k, v := range obj {
			if ft, ok := fields[k]; ok {
				if out, c := filter(v, ft); c {
					obj[k], changed = out, true
				}
				continue
			}
			for name := range fields {
				if strings.EqualFold(name, k) {
					delete(obj, k)
					changed = true
					break
				}
			}
		}
		if !changed {
			return raw, false
		}
		return encode(obj), true
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return raw, false
		}
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return raw, false
		}
		changed := false
		for i, it := range items {
			if out, c := filter(it, t.Elem()); c {
				items[i], changed = out, true
			}
		}
		if !changed {
			return raw, false
		}
		return encode(items), true
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return raw, false
		}
		changed := false
		for k, v := range obj {
			if out, c := filter(v, t.Elem()); c {
				obj[k], changed = out, true
			}
		}
		if !changed {
			return raw, false
		}
		return encode(obj), true
	}
	return raw, false
}

// names maps the JSON names of t's exported fields (embedded structs
// included) to their types.
func names(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range names(ft) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		name = cmp.Or(name, f.Name)
		out[name] = f.Type
	}
	return out
}

// encode re-encodes v without HTML escaping, so the values the caller
// keeps (args, meta) are the client's bytes, compacted.
func encode(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(b.Bytes(), "\n")
}
