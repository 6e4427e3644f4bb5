package job

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/ojs-aws/ojs-serverless/pkg/ojserr"
	"github.com/ojs-aws/ojs-serverless/pkg/retry"
	"golang.org/x/text/unicode/norm"
)

// Conflict strategies of a unique policy (ojs-unique-jobs.md section 5).
const (
	UniqueReject                = "reject"
	UniqueReplace               = "replace"
	UniqueReplaceExceptSchedule = "replace_except_schedule"
	UniqueIgnore                = "ignore"
)

// DefaultUniqueStates are the states a duplicate is looked for in when a
// policy names none: every non-terminal state.
var DefaultUniqueStates = []State{Available, Active, Scheduled, Retryable, Pending}

// Unique is a validated unique policy with the job's uniqueness key.
type Unique struct {
	// Key is the lowercase hex SHA-256 of the canonical fingerprint.
	Key string
	// Period is how long after the holder's creation the key is held (0:
	// as long as the holder is in one of States).
	Period     time.Duration
	States     map[State]bool
	OnConflict string
}

type uniqueRequest struct {
	Keys       []string `json:"keys"`
	ArgsKeys   []string `json:"args_keys"`
	MetaKeys   []string `json:"meta_keys"`
	Period     *string  `json:"period"`
	States     []string `json:"states"`
	OnConflict *string  `json:"on_conflict"`
}

// parseUnique validates a unique policy against the job it belongs to and
// computes the uniqueness key (section 4: type always, plus the listed
// dimensions, canonical JSON with sorted keys, SHA-256).
func parseUnique(raw json.RawMessage, j *Job) (*Unique, error) {
	var r uniqueRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, ojserr.Invalid("unique", "The 'unique' policy must be an object with keys, args_keys, meta_keys, period, states and on_conflict: %v.", err)
	}
	u := &Unique{OnConflict: UniqueReject, States: map[State]bool{}}
	if r.OnConflict != nil {
		if !slices.Contains([]string{UniqueReject, UniqueReplace, UniqueReplaceExceptSchedule, UniqueIgnore}, *r.OnConflict) {
			return nil, ojserr.Invalid("unique.on_conflict", "'unique.on_conflict' must be reject, replace, replace_except_schedule or ignore.")
		}
		u.OnConflict = *r.OnConflict
	}
	if r.Period != nil {
		d, err := retry.ParseDuration(*r.Period)
		if err != nil || d <= 0 {
			return nil, ojserr.Invalid("unique.period", "'unique.period' must be a positive ISO 8601 duration such as PT1H or P7D.")
		}
		u.Period = d
	}
	if r.States == nil {
		for _, s := range DefaultUniqueStates {
			u.States[s] = true
		}
	} else if len(r.States) == 0 {
		return nil, ojserr.Invalid("unique.states", "'unique.states' must name at least one state.")
	} else {
		for _, s := range r.States {
			if !State(s).Valid() {
				return nil, ojserr.Invalid("unique.states", "'unique.states' has an unknown state %q.", s)
			}
			u.States[State(s)] = true
		}
	}
	fp := map[string]any{"type": j.Type}
	keys := r.Keys
	if keys == nil {
		keys = []string{"type"}
	}
	for _, k := range keys {
		switch k {
		case "type":
		case "queue":
			fp["queue"] = j.Queue
		case "args":
			var args any
			if err := json.Unmarshal(j.Args, &args); err != nil {
				return nil, ojserr.Invalid("args", "The 'args' field is not valid JSON.")
			}
			if r.ArgsKeys != nil {
				sel, err := selectKeys(args, r.ArgsKeys, "args")
				if err != nil {
					return nil, err
				}
				args = sel
			}
			fp["args"] = args
		case "meta":
			if len(r.MetaKeys) == 0 {
				return nil, ojserr.Invalid("unique.meta_keys", "'unique.keys' includes \"meta\", so 'unique.meta_keys' must list the meta keys to use.")
			}
			var meta map[string]any
			_ = json.Unmarshal(j.Meta, &meta)
			sel := map[string]any{}
			for _, mk := range r.MetaKeys {
				sel[mk] = meta[mk]
			}
			fp["meta"] = sel
		default:
			return nil, ojserr.Invalid("unique.keys", "'unique.keys' has %q; allowed are type, queue, args and meta.", k)
		}
	}
	var b bytes.Buffer
	canonical(&b, fp)
	sum := sha256.Sum256(b.Bytes())
	u.Key = hex.EncodeToString(sum[:])
	return u, nil
}

// selectKeys picks args_keys from args: the keys of an object argument
// (the first object in the args array, or args itself if an object).
func selectKeys(args any, keys []string, field string) (map[string]any, error) {
	var obj map[string]any
	switch a := args.(type) {
	case map[string]any:
		obj = a
	case []any:
		for _, v := range a {
			if m, ok := v.(map[string]any); ok {
				obj = m
				break
			}
		}
	}
	sel := map[string]any{}
	for _, k := range keys {
		v, ok := obj[k]
		if !ok {
			return nil, ojserr.Invalid("unique.args_keys", "'unique.args_keys' names %q, which is not a key of the job's %s.", k, field)
		}
		sel[k] = v
	}
	return sel, nil
}

// canonical writes v as JSON with sorted object keys, strings in Unicode
// NFC and no whitespace (the parts of RFC 8785 that matter for values
// decoded from JSON).
func canonical(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case map[string]any:
		ks := slices.Sorted(maps.Keys(x))
		b.WriteByte('{')
		for i, k := range ks {
			if i > 0 {
				b.WriteByte(',')
			}
			canonical(b, norm.NFC.String(k))
			b.WriteByte(':')
			canonical(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			canonical(b, e)
		}
		b.WriteByte(']')
	case float64:
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		var sb bytes.Buffer
		enc := json.NewEncoder(&sb)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(norm.NFC.String(x))
		b.Write(bytes.TrimRight(sb.Bytes(), "\n"))
	default:
		enc, _ := json.Marshal(x)
		b.Write(enc)
	}
}
