package health

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// A component adds checks as it starts while /readyz may already be
// asked: Add and Run must not race (go test -race).
func TestAddWhileRunning(t *testing.T) {
	c := New()
	c.Add("first", func(context.Context) error { return nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			c.Add("check-"+strconv.Itoa(i), func(context.Context) error { return nil })
		}
	}()
	for range 200 {
		if failed := c.Run(context.Background()); len(failed) != 0 {
			t.Fatalf("failed: %v", failed)
		}
	}
	<-done
	c.Add("late", func(context.Context) error { return errors.New("not yet") })
	if failed := c.Run(context.Background()); len(failed) != 1 || failed["late"] != "not yet" {
		t.Fatalf("failed: %v", failed)
	}
}

func TestReadyzSaysWhichCheckFailed(t *testing.T) {
	c := New()
	mux := http.NewServeMux()
	c.Register(mux)
	get := func(path string) (int, map[string]any) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var body map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: %v (%q)", path, err, rec.Body.String())
		}
		return rec.Code, body
	}
	if code, body := get("/readyz"); code != http.StatusOK || body["status"] != "ready" {
		t.Fatalf("no checks: %d %v", code, body)
	}
	c.Add("db", func(context.Context) error { return errors.New("down") })
	code, body := get("/readyz")
	if failed, _ := body["failed"].(map[string]any); code != http.StatusServiceUnavailable || failed["db"] != "down" {
		t.Fatalf("failing check: %d %v", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body["status"] != "ok" {
		t.Fatalf("liveness: %d %v", code, body)
	}
}
