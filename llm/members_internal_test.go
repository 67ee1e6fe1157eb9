package llm

import (
	"encoding/json"
	"testing"
)

// FuzzPicker: of a valid JSON object, the usage the picker's members
// give is the usage of the whole body read at once (which also reads
// the usage of a top "response" or "message", as stream events carry
// it: bodies with those are left out).
func FuzzPicker(f *testing.F) {
	for _, s := range []string{`{"usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"a":[1,{"usage":{"input_tokens":3}}],"usage":{"prompt_tokens":1},"b":"\"usage\":{","usage":{"completion_tokens":4}}`,
		`{"u\u0073age":{"input_tokens":3}, "usage" : null}`, `{"usage":-1}`, `{}`} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, cut uint8) {
		var top map[string]json.RawMessage
		if !json.Valid(body) || json.Unmarshal(body, &top) != nil || top == nil {
			return
		}
		if _, ok := top["response"]; ok {
			return
		}
		if _, ok := top["message"]; ok {
			return
		}
		var whole report
		if !whole.read(body) {
			return // nested past maxDepth, which the scanner refuses
		}
		var want tally
		want.add(&whole)
		k := newPicker([]string{"usage"}, 1<<20)
		n := min(int(cut), len(body))
		k.write(body[:n])
		k.write(body[n:])
		obj, ok := k.object()
		if !ok {
			t.Fatalf("a valid body gave no object")
		}
		var picked report
		if !picked.read(obj) {
			t.Fatalf("the members picked %q are not one object", obj)
		}
		var got tally
		got.add(&picked)
		wu, wok := want.usage()
		gu, gok := got.usage()
		if wu != gu || wok != gok {
			t.Fatalf("the whole body gave %+v, %v; its members %q gave %+v, %v", wu, wok, obj, gu, gok)
		}
	})
}
