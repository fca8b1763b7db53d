package admin

import (
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/portico-io/portico/controlplane/spec"
	"github.com/portico-io/portico/internal/idp"
)

// providerInput, on a control plane started for a development machine
// (Config.LoopbackIdPs), marks a JWT provider whose endpoints are plain
// http on loopback as allowInsecureLoopback, so the architecture's
// example provider (JWKS at http://127.0.0.1:18950) is accepted as
// written by make run. A provider that states the field keeps what it
// says; any other endpoint is left for validation to judge.
func (h *Handler) providerInput(k spec.Kind, body []byte) ([]byte, error) {
	if !h.loopIdPs || k != spec.KindJWTProvider {
		return body, nil
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return body, nil // spec.Decode reports it
	}
	if _, stated := obj["allowInsecureLoopback"]; stated {
		return body, nil
	}
	loopback := false
	for _, field := range []string{"jwksUri", "introspectionUri"} {
		var raw string
		if json.Unmarshal(obj[field], &raw) != nil {
			continue
		}
		if u, err := url.Parse(raw); err == nil && u.Scheme == "http" && idp.IsLoopback(u.Hostname()) {
			loopback = true
		}
	}
	if !loopback {
		return body, nil
	}
	obj["allowInsecureLoopback"] = json.RawMessage("true")
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("admin: encode provider: %w", err)
	}
	return out, nil
}
