package jobspec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// storedSeeds are specs as clients send them, covering every field.
var storedSeeds = []string{
	`{"tenant":"acme","schedule":{"type":"ONE_OFF","at":"2026-12-03T04:00:00Z"},"target":{"type":"HTTP","http":{"url":"https://example.com/hook","method":"POST"}},"execution":{"retry":{"maxAttempts":3}}}`,
	`{"tenant":"t-2","name":"nightly ünïcode \u2028 \"quoted\"","schedule":{"type":"CRON","expression":"0 3 * * *","timeZone":"Europe/Paris","startAt":"2026-01-01T00:00:00+01:00","endAt":"2027-01-01T00:00:00Z"},
	  "target":{"type":"HTTP","http":{"url":"https://example.com/a?b=c&d=%20","method":"PUT","headers":{"X-A":"1","x-b":"two"},"secretRef":{"name":"tok","header":"X-Key","prefix":"Bearer "}},"payload":{"run":"{{.ScheduledAt}}","n":[1,2.5,-3e10,null,true]}},
	  "execution":{"timeoutSeconds":30,"retry":{"maxAttempts":5,"initialBackoffMs":250,"maxBackoffMs":60000},"concurrencyPolicy":"FORBID","misfirePolicy":"FIRE_ALL","misfireCap":7,"priority":"HIGH","jitterSeconds":9,"maxDeferSeconds":120},
	  "notifications":{"onFailure":["https://example.com/f"],"onDeadLetter":["https://example.com/d","https://example.com/e"]},"enabled":false}`,
	`{"tenant":"q","schedule":{"type":"FIXED_RATE","every":"90s","anchor":"2026-06-01T12:00:00.123456789Z"},"target":{"type":"QUEUE","queue":{"topic":"jobs","key":null},"payload":"plain"},"execution":{"retry":{}},"enabled":true}`,
	`{"tenant":"c","schedule":{"type":"ONE_OFF","at":"2026-12-03T04:00:00Z"},"target":{"type":"CONTAINER","container":{"image":"busybox","args":["sh","-c","echo hi"]},"http":{"url":"","body":"{\"a\":1}"}},"execution":{"retry":{"maxAttempts":1}}}`,
}

// The contract: what the store writes (encoding/json of a decoded spec,
// as Postgres hands it back) DecodeStored reads back exactly as
// encoding/json would.
func FuzzDecodeStoredRoundTrips(f *testing.F) {
	for _, s := range storedSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		spec, err := Decode(strings.NewReader(in))
		if err != nil {
			return
		}
		raw, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		want := new(Spec)
		if err := json.Unmarshal(raw, want); err != nil {
			t.Fatal(err)
		}
		got, err := DecodeStored(raw)
		if err != nil {
			t.Fatalf("DecodeStored(%s): %v", raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeStored(%s) = %+v, encoding/json = %+v", raw, got, want)
		}
	})
}

func TestDecodeStoredRejectsWhatIsNotASpec(t *testing.T) {
	for _, in := range []string{``, `{`, `[]`, `{"tenant":1}`, `{"schedule":{"at":"yesterday"}}`, `null x`} {
		if _, err := DecodeStored([]byte(in)); err == nil {
			t.Errorf("DecodeStored(%q) accepted", in)
		}
	}
}
