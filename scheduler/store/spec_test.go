package store

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/portico-io/portico/scheduler/jobspec"
)

// Specs are read back with jobspec.DecodeStored, not encoding/json: what
// Postgres hands back for a stored spec (jsonb's own key order, spacing,
// number and escape forms) must decode exactly as encoding/json decodes it.
func TestStoredSpecsDecodeAsEncodingJSONDoes(t *testing.T) {
	s := openTestStore(t)
	for _, in := range []string{
		benchSpec,
		`{"tenant":"t-2","name":"nightly ünïcode \u2028 \"quoted\" \\ \t","schedule":{"type":"CRON","expression":"0 3 * * *","timeZone":"Europe/Paris",
			"startAt":"2026-01-01T00:00:00+01:00","endAt":"2027-01-01T00:00:00.123456789Z"},
		  "target":{"type":"HTTP","http":{"url":"https://example.com/a?b=c&d=%20","method":"PUT","headers":{"X-A":"1","x-b":"two"},
			"secretRef":{"name":"tok","header":"X-Key","prefix":"Bearer "}},"payload":{"run":"{{.ScheduledAt}}","n":[1,2.50,-3e10,1E-7,null,true],"z":{}}},
		  "execution":{"timeoutSeconds":30,"retry":{"maxAttempts":5,"initialBackoffMs":250,"maxBackoffMs":60000},"concurrencyPolicy":"FORBID",
			"misfirePolicy":"FIRE_ALL","misfireCap":7,"priority":"HIGH","jitterSeconds":9,"maxDeferSeconds":120},
		  "notifications":{"onFailure":["https://example.com/f"],"onDeadLetter":["https://example.com/d","https://example.com/e"]},"enabled":false}`,
		`{"tenant":"q","schedule":{"type":"FIXED_RATE","every":"90s","anchor":"2026-06-01T12:00:00Z"},"target":{"type":"QUEUE","queue":{"topic":"jobs","key":null},
			"payload":"plain"},"execution":{"retry":{}},"enabled":true}`,
	} {
		spec, err := jobspec.Decode(strings.NewReader(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		stored, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		var raw []byte
		if err := s.pool.QueryRow(context.Background(), `SELECT $1::jsonb`, stored).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		want := new(jobspec.Spec)
		if err := json.Unmarshal(raw, want); err != nil {
			t.Fatal(err)
		}
		got, err := jobspec.DecodeStored(raw)
		if err != nil {
			t.Fatalf("DecodeStored(%s): %v", raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("DecodeStored(%s) = %+v, encoding/json = %+v", raw, got, want)
		}
	}
}
