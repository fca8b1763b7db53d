package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// client calls the nodes' admin API: https with the operator certificate
// when tls is set, a bearer token when token is.
type client struct {
	addrs []string
	tls   *tls.Config
	token string
	http  *http.Client
}

func (c *client) init() {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if c.tls != nil {
		tr.TLSClientConfig = c.tls
	}
	// No overall client timeout: backups stream; the context bounds each call.
	c.http = &http.Client{Transport: tr}
}

func (c *client) url(addr, path string) string {
	if c.tls != nil {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// apiError is a non-2xx answer.
type apiError struct {
	Status int
	Code   string
	Msg    string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg)
}

// send makes a request whose answer body is not needed.
func (c *client) send(ctx context.Context, method, addr, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url(addr, path), bytes.NewReader(body))
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return &apiError{Status: resp.StatusCode, Msg: string(bytes.TrimSpace(b))}
	}
	return nil
}

// post sends body to addr+path and returns the response when it is 2xx;
// the caller closes its body.
func (c *client) post(ctx context.Context, addr, path, contentType string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(addr, path), body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	ae := &apiError{Status: resp.StatusCode, Msg: string(bytes.TrimSpace(b))}
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		ae.Code, ae.Msg = eb.Error.Code, eb.Error.Message
	}
	return nil, ae
}

// postJSON posts in (nil: no body) and decodes the answer into out.
func (c *client) postJSON(ctx context.Context, addr, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.post(ctx, addr, path, "application/json", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// get fetches addr+path into out (JSON).
func (c *client) get(ctx context.Context, addr, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(addr, path), nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return &apiError{Status: resp.StatusCode, Msg: string(bytes.TrimSpace(b))}
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// retry runs fn up to attempts times while it fails with a 503 (the
// consensus tier between leaders) or a transport error on an idempotent
// call, pausing between tries.
func retry(ctx context.Context, attempts int, fn func() error) error {
	var err error
	for i := range attempts {
		if err = fn(); err == nil {
			return nil
		}
		var ae *apiError
		if errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable {
			return err
		}
		if i == attempts-1 {
			break
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(i+1) * 500 * time.Millisecond):
		}
	}
	return err
}
