package workflow_test

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// What the tests' DynamoDB clients (latefailure_test.go, control_test.go,
// repair_test.go) read of a request to pick the one they fail, delay or
// answer differently: its key, and the clauses of an update expression
// with their placeholders resolved.

// keyS is the string attribute a of a request's key ("" when absent).
func keyS(key map[string]types.AttributeValue, a string) string {
	if v, ok := key[a].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// updateClauses splits an update expression into its clauses by keyword
// (SET, REMOVE, ADD, DELETE), each a list of tokens (split at spaces and
// commas) with the name placeholders resolved through names and the
// string value placeholders through values.
func updateClauses(expr string, names map[string]string, values map[string]types.AttributeValue) map[string][]string {
	out := map[string][]string{}
	clause := ""
	for _, tok := range strings.FieldsFunc(expr, func(r rune) bool { return r == ' ' || r == ',' || r == '\n' || r == '\t' }) {
		switch k := strings.ToUpper(tok); k {
		case "SET", "REMOVE", "ADD", "DELETE":
			clause = k
			continue
		}
		if n, ok := names[tok]; ok {
			tok = n
		} else if v, ok := values[tok].(*types.AttributeValueMemberS); ok {
			tok = v.Value
		}
		out[clause] = append(out[clause], tok)
	}
	return out
}

// removes reports whether an update's REMOVE clause removes attr.
func removes(expr *string, names map[string]string, attr string) bool {
	if expr == nil {
		return false
	}
	for _, a := range updateClauses(*expr, names, nil)["REMOVE"] {
		if a == attr {
			return true
		}
	}
	return false
}

// setsTo reports whether an update's SET clause sets attr to the string v.
func setsTo(expr *string, names map[string]string, values map[string]types.AttributeValue, attr, v string) bool {
	if expr == nil {
		return false
	}
	set := updateClauses(*expr, names, values)["SET"]
	for i := 0; i+2 < len(set); i++ {
		if set[i] == attr && set[i+1] == "=" && set[i+2] == v {
			return true
		}
	}
	return false
}

// hasValueS reports whether a request's expression values hold the
// string v (a state its condition admits, say).
func hasValueS(values map[string]types.AttributeValue, v string) bool {
	for _, av := range values {
		if s, ok := av.(*types.AttributeValueMemberS); ok && s.Value == v {
			return true
		}
	}
	return false
}
