// Command gen writes the policy file's reference (package reference):
// policy/schema.json and docs/reference/configuration.md, from the module
// root given as its argument (default ..).
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/tollgate/tollgate/internal/reference"
)

func main() {
	root := ".."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	schema, md, err := reference.Generate(filepath.Join(root, "policy"))
	if err != nil {
		log.Fatal(err)
	}
	for path, b := range map[string][]byte{reference.SchemaFile: schema, reference.MarkdownFile: md} {
		if err := os.WriteFile(filepath.Join(root, path), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
