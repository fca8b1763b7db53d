package apierror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

func TestCommon(t *testing.T) {
	mine := BadParam("limit", "must be a number")
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("list: %w", mine), http.StatusBadRequest, CodeInvalidParameter},
		{fmt.Errorf("decode: %w", &http.MaxBytesError{Limit: 10}), http.StatusRequestEntityTooLarge, CodeBodyTooLarge},
		{fmt.Errorf("store: %w", context.Canceled), StatusClientClosed, CodeCanceled},
	} {
		e, ok := Common(tc.err)
		if !ok || e.Status != tc.status || e.Code != tc.code {
			t.Errorf("Common(%v) = %+v, %v", tc.err, e, ok)
		}
	}
	if e, ok := Common(errors.New("disk on fire")); ok || e != nil {
		t.Errorf("an unknown error mapped to %+v", e)
	}
	if e := Internal(); e.Status != http.StatusInternalServerError || e.Message != "internal error" {
		t.Errorf("Internal() = %+v", e)
	}
}

// The envelope's shape is the platform contract: code, message and field
// always present, the status only in the HTTP status line.
func TestBodyShape(t *testing.T) {
	b, err := json.Marshal(Body(&Error{Status: 404, Code: CodeNotFound, Message: "not found"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"error":{"code":"not_found","message":"not found","field":""}}`; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}
