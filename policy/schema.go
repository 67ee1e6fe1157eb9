package policy

import _ "embed"

//go:generate go run ../internal/reference/gen ..

// Schema is the policy file's JSON Schema (schema.json), generated from
// the file's types and their comments (package internal/reference):
// `tollgate schema` prints it, and an editor checks a policy against it.
//
//go:embed schema.json
var Schema []byte
