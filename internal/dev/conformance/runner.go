// Package conformance builds the public OJS conformance runner from a copy
// of the suite (third_party/ojs-conformance); localstack/cmd/ojs-conformance
// runs it against a local stack.
//
// The stored runner (v0.4.0) does not evaluate four things some extension
// suites use: a step's "capture" with "{{name}}" references, the bare
// matchers {"$type": ...} and {"$gte": n}, and paths through keys with dots
// ($.job.meta.ojs.codec.key_id for the meta key "ojs.codec.key_id"). With
// Options.Patch the runner is built with a Go -overlay that adds exactly
// those; docs/admin.md lists the tests that need it.
package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Options configure Build.
type Options struct {
	// Dir is the conformance repository copy (shared/ojs-conformance).
	Dir string
	// Out is the runner binary to write.
	Out string
	// Patch adds capture and the bare $type/$gte/$gt/$lte/$lt matchers
	// (see the package doc).
	Patch bool
}

// edit is one textual change to a runner source file: Anchor must occur
// exactly once and is replaced by Replace.
type edit struct {
	file, anchor, replace string
}

var edits = []edit{
	{"lib/schema.go", "\tParallelWith string            `json:\"parallel_with,omitempty\"`\n",
		"\tParallelWith string            `json:\"parallel_with,omitempty\"`\n\tCapture      map[string]string `json:\"capture,omitempty\"`\n\tExpect       map[string]json.RawMessage `json:\"expect,omitempty\"`\n\tRequest      json.RawMessage   `json:\"request,omitempty\"`\n\tStore        map[string]string `json:\"store,omitempty\"`\n"},
	{"runner/http/runner.go", "func executeStep(step lib.Step, baseURL string, client *http.Client, stepResults map[string]*lib.StepResult, timingCfg lib.TimingConfig) (*lib.StepResult, []lib.Failure) {\n",
		"func executeStep(step lib.Step, baseURL string, client *http.Client, stepResults map[string]*lib.StepResult, timingCfg lib.TimingConfig) (*lib.StepResult, []lib.Failure) {\n\tstep, actionErr := fromAction(step)\n\tif actionErr != nil {\n\t\treturn &lib.StepResult{StepID: step.ID}, []lib.Failure{{StepID: step.ID, Message: actionErr.Error()}}\n\t}\n"},
	{"lib/assertions.go", "\tobj, ok := actual.(map[string]any)\n\tif !ok {\n\t\treturn fmt.Errorf(\"expected object, got %T: %v\", actual, actual)\n\t}\n\tfor key, exp := range expected {",
		"\tif handled, err := matchBareOperators(expected, actual); handled {\n\t\treturn err\n\t}\n\tobj, ok := actual.(map[string]any)\n\tif !ok {\n\t\treturn fmt.Errorf(\"expected object, got %T: %v\", actual, actual)\n\t}\n\tfor key, exp := range expected {"},
	{"runner/http/runner.go", "\t// Evaluate assertions\n\tvar failures []lib.Failure\n",
		"\tsaveCaptures(step, sr, stepResults)\n\tstep = withExpect(step)\n\n\t// Evaluate assertions\n\tvar failures []lib.Failure\n"},
	{"runner/http/runner.go", "func resolveTemplates(input string, stepResults map[string]*lib.StepResult) string {\n\treturn templateRefPattern.ReplaceAllStringFunc(input,",
		"func resolveTemplates(input string, stepResults map[string]*lib.StepResult) string {\n\tinput = resolveCaptures(input, stepResults)\n\treturn templateRefPattern.ReplaceAllStringFunc(input,"},
	{"runner/http/runner.go", "\tif !strings.Contains(s, \"{{steps.\") {\n\t\treturn matcher\n\t}",
		"\tif !strings.Contains(s, \"{{\") && !strings.Contains(s, \"${\") {\n\t\treturn matcher\n\t}"},
	{"runner/http/runner.go", "\tvar allResults []lib.StepResult\n\tvar allFailures []lib.Failure\n",
		"\tvar allResults []lib.StepResult\n\tvar allFailures []lib.Failure\n\tsteps = withStepIDs(steps)\n"},
	{"lib/assertions.go", "func ResolveJSONPath(path string, data any) (any, error) {\n",
		"func ResolveJSONPath(path string, data any) (any, error) {\n\tif v, ok := resolveDottedKey(path, data); ok {\n\t\treturn v, nil\n\t}\n"},
}

// added files: the helpers the edits call.
var added = map[string]string{
	"lib/zz_ojs_serverless_dotted.go": `package lib

import (
	"strconv"
	"strings"
)

// resolveDottedKey resolves a path through object keys that contain dots
// ("ojs.codec.encodings", the meta keys of the encryption extension),
// which the dot-path syntax cannot address: at each object the longest run
// of the remaining segments joined by dots that is a key is taken (one
// trailing [n] index allowed). It reports true only when such a key was
// used; every other path is left to ResolveJSONPath as it was.
func resolveDottedKey(path string, data any) (any, bool) {
	parts := strings.Split(strings.TrimPrefix(path, "$."), ".")
	cur, dotted := data, false
	for i := 0; i < len(parts); {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		j := len(parts)
		for ; j > i; j-- {
			name, idx := strings.Join(parts[i:j], "."), -1
			if k := strings.Index(name, "["); k >= 0 && strings.HasSuffix(name, "]") {
				n, err := strconv.Atoi(name[k+1 : len(name)-1])
				if err != nil {
					continue
				}
				name, idx = name[:k], n
			}
			v, ok := obj[name]
			if !ok {
				continue
			}
			if idx >= 0 {
				arr, ok := v.([]any)
				if !ok || idx >= len(arr) {
					return nil, false
				}
				v = arr[idx]
			}
			cur, dotted = v, dotted || j-i > 1
			break
		}
		if j == i {
			return nil, false
		}
		i = j
	}
	return cur, dotted
}
`,
	"lib/zz_ojs_serverless_matchers.go": `package lib

import (
	"encoding/json"
	"fmt"
)

// matchBareOperators evaluates {"$type": t} and numeric comparisons
// ({"$gte": n}, "$gt", "$lte", "$lt") used without $exists. It reports
// whether expected was such a matcher.
func matchBareOperators(expected map[string]json.RawMessage, actual any) (bool, error) {
	handled := false
	if raw, ok := expected["$type"]; ok {
		handled = true
		var t string
		if err := json.Unmarshal(raw, &t); err != nil {
			return true, fmt.Errorf("invalid $type value: %s", string(raw))
		}
		if got := jsonType(actual); got != t {
			return true, fmt.Errorf("expected type %q, got %q", t, got)
		}
	}
	for _, op := range []string{"$gte", "$gt", "$lte", "$lt"} {
		raw, ok := expected[op]
		if !ok {
			continue
		}
		handled = true
		var want float64
		if err := json.Unmarshal(raw, &want); err != nil {
			return true, fmt.Errorf("invalid %s value: %s", op, string(raw))
		}
		n, ok := toFloat64(actual)
		if !ok {
			return true, fmt.Errorf("expected a number for %s, got %T: %v", op, actual, actual)
		}
		if (op == "$gte" && n < want) || (op == "$gt" && n <= want) || (op == "$lte" && n > want) || (op == "$lt" && n >= want) {
			return true, fmt.Errorf("expected %s %v, got %v", op, want, n)
		}
	}
	return handled, nil
}
`,
	"runner/http/zz_ojs_serverless_actions.go": `package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openjobspec/ojs-conformance/lib"
)

// fromAction turns a step written as a client action (the federation and
// ml-resources suites: "action": "push" | "get" | "fetch" | "ack" with a
// "request", an "expect" of "status" and "body", and "store") into the HTTP
// step it means. An action answers what a client's call returns: the job
// for push, get and ack ("job" in the HTTP binding's answer), the answer
// itself for fetch. "body" is a partial match: each leaf of its objects is
// a path under that subject (arrays compared whole). Steps with no
// "request" are returned unchanged; an action this runner does not know
// fails the step.
func fromAction(step lib.Step) (lib.Step, error) {
	if len(step.Request) == 0 {
		return step, nil
	}
	var req map[string]any
	if err := json.Unmarshal(step.Request, &req); err != nil {
		return step, fmt.Errorf("action %q: request is not an object: %v", step.Action, err)
	}
	subject := "$.job"
	switch strings.ToLower(step.Action) {
	case "push":
		step.Action, step.Path, step.Body = "POST", "/ojs/v1/jobs", step.Request
	case "get":
		id, _ := req["id"].(string)
		step.Action, step.Path, step.Body = "GET", "/ojs/v1/jobs/"+id, nil
	case "fetch":
		step.Action, step.Path, step.Body, subject = "POST", "/ojs/v1/workers/fetch", step.Request, "$"
	case "ack":
		req["job_id"] = req["id"]
		delete(req, "id")
		b, _ := json.Marshal(req)
		step.Action, step.Path, step.Body = "POST", "/ojs/v1/workers/ack", b
	default:
		return step, fmt.Errorf("action %q is not one this runner executes", step.Action)
	}
	a := &lib.Assertions{Body: map[string]json.RawMessage{}}
	for k, v := range step.Expect {
		switch k {
		case "status":
			a.Status = v
		case "body":
			var body map[string]json.RawMessage
			if err := json.Unmarshal(v, &body); err != nil {
				return step, fmt.Errorf("expect.body is not an object: %v", err)
			}
			flattenExpect(subject, body, a.Body)
		default:
			return step, fmt.Errorf("unsupported expect key %q", k)
		}
	}
	step.Assertions, step.Expect = a, nil
	if len(step.Store) > 0 {
		step.Capture = map[string]string{}
		for name, path := range step.Store {
			step.Capture[name] = subject + "." + path
		}
	}
	return step, nil
}

// withStepIDs names the steps that have no "id" ("step-<n>", counted from
// 1): the runner runs each id once, so that without ids every step after
// the first of a test was skipped.
func withStepIDs(steps []lib.Step) []lib.Step {
	out := make([]lib.Step, len(steps))
	for i, st := range steps {
		if st.ID == "" {
			st.ID = fmt.Sprintf("step-%d", i+1)
		}
		out[i] = st
	}
	return out
}

// flattenExpect adds each leaf of body to out as a path under prefix.
func flattenExpect(prefix string, body map[string]json.RawMessage, out map[string]json.RawMessage) {
	for k, v := range body {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) == nil && len(obj) > 0 && !isMatcher(obj) {
			flattenExpect(prefix+"."+k, obj, out)
			continue
		}
		out[prefix+"."+k] = v
	}
}

// isMatcher reports whether obj is one of the runner's matchers ($exists,
// $gte, ...) rather than an object to match key by key.
func isMatcher(obj map[string]json.RawMessage) bool {
	for k := range obj {
		if strings.HasPrefix(k, "$") {
			return true
		}
	}
	return false
}
`,
	"runner/http/zz_ojs_serverless_capture.go": `package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/openjobspec/ojs-conformance/lib"
)

// A step's "capture" (or "store") saves values of its response under
// names; "{{name}}", "${name}" or "$ref.name" in later steps' paths, bodies
// and matchers refers to them.
// They are kept in the test's step results under a reserved key.
var (
	captureMu  sync.Mutex
	captureRef = regexp.MustCompile(` + "`\\{\\{([A-Za-z_][A-Za-z0-9_]*)\\}\\}|\\$\\{([A-Za-z_][A-Za-z0-9_]*)\\}|\\$ref\\.([A-Za-z_][A-Za-z0-9_]*)`" + `)
)

// withExpect gives a step written with "expect" (the form of the
// durable-execution suite: "status", "status_in", "body.<path>") the
// assertions it means, when it has none; any other key fails the step.
func withExpect(step lib.Step) lib.Step {
	if step.Assertions != nil || len(step.Expect) == 0 {
		return step
	}
	a := &lib.Assertions{Body: map[string]json.RawMessage{}}
	for k, v := range step.Expect {
		switch {
		case k == "status":
			a.Status = v
		case k == "status_in":
			_ = json.Unmarshal(v, &a.StatusIn)
		case strings.HasPrefix(k, "body."):
			a.Body["$."+strings.TrimPrefix(k, "body.")] = v
		default:
			a.BodyContains = append(a.BodyContains, "unsupported expect key "+k)
		}
	}
	step.Assertions = a
	return step
}

const captureKey = "\x00capture:"

func saveCaptures(step lib.Step, sr *lib.StepResult, stepResults map[string]*lib.StepResult) {
	if len(step.Capture) == 0 || sr.Parsed == nil {
		return
	}
	captureMu.Lock()
	defer captureMu.Unlock()
	for name, path := range step.Capture {
		if v, err := lib.ResolveJSONPath(path, sr.Parsed); err == nil && v != nil {
			stepResults[captureKey+name] = &lib.StepResult{Parsed: map[string]any{"v": v}}
		}
	}
}

func resolveCaptures(input string, stepResults map[string]*lib.StepResult) string {
	captureMu.Lock()
	defer captureMu.Unlock()
	return captureRef.ReplaceAllStringFunc(input, func(m string) string {
		sub := captureRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		sr, ok := stepResults[captureKey+name]
		if !ok {
			return m
		}
		switch v := sr.Parsed["v"].(type) {
		case string:
			return v
		case float64:
			if v == float64(int64(v)) {
				return fmt.Sprintf("%d", int64(v))
			}
			return fmt.Sprintf("%v", v)
		default:
			b, _ := json.Marshal(v)
			return string(b)
		}
	})
}
`,
}

// Build compiles the runner to o.Out (with the overlay when o.Patch).
func Build(ctx context.Context, o Options) error {
	args := []string{"build", "-o", o.Out}
	if o.Patch {
		tmp, err := os.MkdirTemp("", "ojs-conformance-overlay-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		overlay, err := writeOverlay(o.Dir, tmp)
		if err != nil {
			return err
		}
		args = append(args, "-overlay", overlay)
	}
	args = append(args, "./runner/http")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build the conformance runner: %v\n%s", err, out)
	}
	return nil
}

// writeOverlay writes the patched and added files into tmp and returns the
// overlay file naming them.
func writeOverlay(dir, tmp string) (string, error) {
	replace := map[string]string{}
	patched := map[string]string{}
	for _, e := range edits {
		src, ok := patched[e.file]
		if !ok {
			b, err := os.ReadFile(filepath.Join(dir, e.file))
			if err != nil {
				return "", err
			}
			src = string(b)
		}
		if n := strings.Count(src, e.anchor); n != 1 {
			return "", fmt.Errorf("conformance runner patch: %s: anchor found %d times (the runner changed; update internal/dev/conformance)", e.file, n)
		}
		patched[e.file] = strings.Replace(src, e.anchor, e.replace, 1)
	}
	maps.Copy(patched, added)
	for f, src := range patched {
		p := filepath.Join(tmp, strings.ReplaceAll(f, "/", "_"))
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			return "", err
		}
		abs, err := filepath.Abs(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		replace[abs] = p
	}
	b, _ := json.Marshal(map[string]any{"Replace": replace})
	ov := filepath.Join(tmp, "overlay.json")
	return ov, os.WriteFile(ov, b, 0o644)
}
