// Package jobspec is the job specification: its JSON shape, defaults,
// validation (including the SSRF allowlist for HTTP targets), the fire
// times each schedule type produces and the payload templating.
//
// A validated *Spec is immutable by convention; callers must not modify it.
package jobspec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/portico-io/portico/scheduler/cron"
	"github.com/portico-io/portico/scheduler/secret"
)

// Schedule types, policies and limits.
const (
	TypeCron      = "CRON"
	TypeOneOff    = "ONE_OFF"
	TypeFixedRate = "FIXED_RATE"

	TargetHTTP      = "HTTP"
	TargetQueue     = "QUEUE"
	TargetContainer = "CONTAINER"

	ConcurrencyAllow   = "ALLOW"
	ConcurrencyForbid  = "FORBID"
	ConcurrencyReplace = "REPLACE"

	PriorityHigh   = "HIGH"
	PriorityNormal = "NORMAL"
	PriorityLow    = "LOW"

	// MaxJitterSeconds bounds execution.jitterSeconds.
	MaxJitterSeconds = 3600

	MisfireFireOnce = "FIRE_ONCE"
	MisfireSkip     = "SKIP"
	MisfireFireAll  = "FIRE_ALL"

	// MaxPayloadBytes caps the templated payload (larger data goes by reference).
	MaxPayloadBytes = 256 << 10

	DefaultTimeoutSeconds   = 30
	DefaultMaxAttempts      = 3
	DefaultInitialBackoffMs = 1000
	DefaultMaxBackoffMs     = 60000
	DefaultMisfireCap       = 100
	// DefaultMaxDeferSeconds: an hour of open circuit is an outage to
	// dead-letter and notify about, not to wait out silently.
	DefaultMaxDeferSeconds = 3600
	// MaxMaxDeferSeconds caps execution.maxDeferSeconds (7 days).
	MaxMaxDeferSeconds = 7 * 24 * 3600
	// MinFixedRate is the smallest FIXED_RATE interval accepted.
	MinFixedRate = time.Second
)

// Spec is a job definition as clients send it. Server fields (jobId,
// version, status, nextRunAt) are not part of it.
type Spec struct {
	Tenant    string    `json:"tenant"`
	Name      string    `json:"name,omitempty"`
	Schedule  Schedule  `json:"schedule"`
	Target    Target    `json:"target"`
	Execution Execution `json:"execution"`
	// Notifications are webhooks told about failed attempts and dead letters.
	Notifications *Notifications `json:"notifications,omitempty"`
	Enabled       *bool          `json:"enabled,omitempty"`
}

// Notifications lists webhook URLs (POSTed a JSON event, through the same
// SSRF guard as targets). OnFailure hears of every failed attempt
// (including lease expiries and the last attempt); OnDeadLetter of a run
// moving to DEAD.
type Notifications struct {
	OnFailure    []string `json:"onFailure,omitempty"`
	OnDeadLetter []string `json:"onDeadLetter,omitempty"`
}

// MaxNotificationURLs bounds each notification list.
const MaxNotificationURLs = 10

// Schedule says when a job fires; Type decides which fields apply.
type Schedule struct {
	Type       string     `json:"type"`
	Expression string     `json:"expression,omitempty"`
	TimeZone   string     `json:"timeZone,omitempty"`
	StartAt    *time.Time `json:"startAt,omitempty"`
	EndAt      *time.Time `json:"endAt,omitempty"`
	At         *time.Time `json:"at,omitempty"`
	Every      string     `json:"every,omitempty"`
	Anchor     *time.Time `json:"anchor,omitempty"`
}

// Target says what a run triggers. HTTP is validated here; the
// configuration of other kinds (queue, container) is opaque to the core
// and checked by the KindValidator of the executor registered for it.
type Target struct {
	Type      string          `json:"type"`
	HTTP      *HTTPTarget     `json:"http,omitempty"`
	Queue     json.RawMessage `json:"queue,omitempty"`
	Container json.RawMessage `json:"container,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
}

// KindValidator validates a target of a non-HTTP kind (returning a
// *FieldError for bad input).
type KindValidator func(t *Target) error

// HTTPTarget is an HTTP callback. Body (a string) and Target.Payload (JSON)
// are alternatives; both are templated.
type HTTPTarget struct {
	URL     string            `json:"url"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	// SecretRef names a secret whose value is read at call time and sent
	// as a header; only the reference is ever stored or returned.
	SecretRef *SecretRef `json:"secretRef,omitempty"`
}

// SecretRef sends Prefix + the value of secret Name (a file in the
// scheduler's secrets directory) as header Header (default
// Authorization), e.g. {"name":"billing-token","prefix":"Bearer "}.
type SecretRef struct {
	Name   string `json:"name"`
	Header string `json:"header,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// DefaultSecretHeader is the header a secretRef without one sets.
const DefaultSecretHeader = "Authorization"

// Execution is how the scheduler runs the job.
type Execution struct {
	TimeoutSeconds    int    `json:"timeoutSeconds,omitempty"`
	Retry             Retry  `json:"retry"`
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty"`
	MisfirePolicy     string `json:"misfirePolicy,omitempty"`
	MisfireCap        int    `json:"misfireCap,omitempty"`
	// Priority orders claiming: HIGH before NORMAL before LOW (and HIGH
	// has worker slots reserved for it).
	Priority string `json:"priority,omitempty"`
	// JitterSeconds delays each run's start by a stable pseudo-random
	// amount in [0, JitterSeconds) derived from its idempotency key, to
	// spread "everyone at midnight" load.
	JitterSeconds int `json:"jitterSeconds,omitempty"`
	// MaxDeferSeconds bounds how long a run may keep being deferred by an
	// open circuit without an attempt (counted from the first deferral
	// since its last real attempt); past it the run goes DEAD with reason
	// CIRCUIT_OPEN. Default DefaultMaxDeferSeconds.
	MaxDeferSeconds int `json:"maxDeferSeconds,omitempty"`
}

// MaxDefer is the run's deferral bound; specs stored before the field
// existed (0) get the default.
func (e Execution) MaxDefer() time.Duration {
	if e.MaxDeferSeconds <= 0 {
		return DefaultMaxDeferSeconds * time.Second
	}
	return time.Duration(e.MaxDeferSeconds) * time.Second
}

// PriorityRank maps a priority to its claim order (0 first).
func PriorityRank(p string) int {
	switch p {
	case PriorityHigh:
		return 0
	case PriorityLow:
		return 2
	}
	return 1
}

// Retry is the retry policy; backoff uses full jitter.
type Retry struct {
	MaxAttempts      int   `json:"maxAttempts,omitempty"`
	InitialBackoffMs int64 `json:"initialBackoffMs,omitempty"`
	MaxBackoffMs     int64 `json:"maxBackoffMs,omitempty"`
}

// FieldError is a validation failure naming the offending field (JSON path).
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return "jobspec: " + e.Field + ": " + e.Message }

// ErrInvalid is matched by every *FieldError via errors.Is.
var ErrInvalid = errors.New("jobspec: invalid")

// Is makes errors.Is(err, ErrInvalid) true for field errors.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, format string, a ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, a...)}
}

// Decode reads a spec strictly (unknown fields are errors) from r. Syntax
// errors are *FieldError with field "" so the edge answers 422 or 400
// without guessing.
func Decode(r io.Reader) (*Spec, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, decodeError(err)
	}
	if dec.More() {
		return nil, fieldErr("", "trailing data after the JSON object")
	}
	return &s, nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fieldErr(te.Field, "wrong type: want %s", te.Type)
	}
	var pe *time.ParseError
	if errors.As(err, &pe) {
		return fieldErr("", "timestamps must be RFC 3339: %v", pe)
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fieldErr(strings.Trim(f, `"`), "unknown field")
	}
	return fieldErr("", "malformed JSON: %s", msg)
}

var methods = map[string]bool{http.MethodGet: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

var headerName = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+.^_|~-]+$`)

// Normalize fills defaults and validates s in place. guard checks HTTP
// targets (resolving their hosts within ctx); nil skips the network check
// (tests of pure shape only). Only HTTP targets are accepted; see
// NormalizeKinds.
func (s *Spec) Normalize(ctx context.Context, g *Guard) error { return s.NormalizeKinds(ctx, g, nil) }

// NormalizeKinds is Normalize accepting, besides HTTP, the target kinds
// in kinds (type → validator), for schedulers with those executors.
func (s *Spec) NormalizeKinds(ctx context.Context, g *Guard, kinds map[string]KindValidator) error {
	if s.Tenant == "" {
		return fieldErr("tenant", "required")
	}
	if len(s.Tenant) > 128 {
		return fieldErr("tenant", "at most 128 bytes")
	}
	if s.Enabled == nil {
		t := true
		s.Enabled = &t
	}
	if err := s.Schedule.normalize(); err != nil {
		return err
	}
	for _, t := range []*time.Time{s.Schedule.StartAt, s.Schedule.EndAt, s.Schedule.At, s.Schedule.Anchor} {
		if t != nil {
			*t = t.UTC()
		}
	}
	if err := s.Target.normalize(ctx, g, kinds); err != nil {
		return err
	}
	if err := s.Notifications.normalize(ctx, g); err != nil {
		return err
	}
	return s.Execution.normalize()
}

func (n *Notifications) normalize(ctx context.Context, g *Guard) error {
	if n == nil {
		return nil
	}
	for _, l := range []struct {
		name string
		urls []string
	}{{"notifications.onFailure", n.OnFailure}, {"notifications.onDeadLetter", n.OnDeadLetter}} {
		name, list := l.name, l.urls
		if len(list) > MaxNotificationURLs {
			return fieldErr(name, "at most %d URLs", MaxNotificationURLs)
		}
		for i, raw := range list {
			field := fmt.Sprintf("%s[%d]", name, i)
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || len(raw) > 2048 || !asciiHost(u.Hostname()) {
				return fieldErr(field, "must be an absolute http(s) URL without credentials, with an ASCII (xn--) host")
			}
			if g != nil {
				if err := g.CheckURL(ctx, raw); err != nil {
					return fieldErr(field, "%v", err)
				}
			}
		}
	}
	return nil
}

func (sc *Schedule) normalize() error {
	switch sc.Type {
	case TypeCron:
		if _, err := cron.Parse(sc.Expression); err != nil {
			return fieldErr("schedule.expression", "%v", err)
		}
		if sc.TimeZone == "" {
			sc.TimeZone = "UTC"
		}
		if _, err := loadZone(sc.TimeZone); err != nil {
			return fieldErr("schedule.timeZone", "unknown IANA time zone %q", sc.TimeZone)
		}
		if sc.StartAt != nil && sc.EndAt != nil && !sc.EndAt.After(*sc.StartAt) {
			return fieldErr("schedule.endAt", "must be after startAt")
		}
		if sc.At != nil || sc.Every != "" || sc.Anchor != nil {
			return fieldErr("schedule.type", "CRON takes expression, timeZone, startAt, endAt")
		}
	case TypeOneOff:
		if sc.At == nil {
			return fieldErr("schedule.at", "required for ONE_OFF")
		}
		if sc.Expression != "" || sc.Every != "" || sc.Anchor != nil || sc.StartAt != nil || sc.EndAt != nil {
			return fieldErr("schedule.type", "ONE_OFF takes only at")
		}
	case TypeFixedRate:
		d, err := ParseISODuration(sc.Every)
		if err != nil {
			return fieldErr("schedule.every", "%v", err)
		}
		if d < MinFixedRate {
			return fieldErr("schedule.every", "must be at least %s", MinFixedRate)
		}
		if sc.Anchor == nil {
			return fieldErr("schedule.anchor", "required for FIXED_RATE")
		}
		if sc.Expression != "" || sc.At != nil {
			return fieldErr("schedule.type", "FIXED_RATE takes every, anchor, endAt")
		}
	case "":
		return fieldErr("schedule.type", "required: CRON, ONE_OFF or FIXED_RATE")
	default:
		return fieldErr("schedule.type", "unknown type %q: CRON, ONE_OFF or FIXED_RATE", sc.Type)
	}
	return nil
}

func (t *Target) normalize(ctx context.Context, g *Guard, kinds map[string]KindValidator) error {
	if len(t.Payload) > MaxPayloadBytes {
		return fieldErr("target.payload", "larger than %d bytes; pass a reference instead", MaxPayloadBytes)
	}
	if t.Type != TargetHTTP {
		v, ok := kinds[t.Type]
		if !ok {
			return fieldErr("target.type", "target type %q is not enabled on this scheduler", t.Type)
		}
		if t.HTTP != nil {
			return fieldErr("target.http", "only for HTTP targets")
		}
		return v(t)
	}
	if t.Queue != nil || t.Container != nil {
		return fieldErr("target.type", "HTTP targets take http and payload only")
	}
	h := t.HTTP
	if h == nil {
		return fieldErr("target.http", "required for HTTP targets")
	}
	if h.Method == "" {
		h.Method = http.MethodPost
	}
	h.Method = strings.ToUpper(h.Method)
	if !methods[h.Method] {
		return fieldErr("target.http.method", "unsupported method %q", h.Method)
	}
	u, err := url.Parse(h.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
		return fieldErr("target.http.url", "must be an absolute http(s) URL without credentials")
	}
	if !asciiHost(u.Hostname()) {
		return fieldErr("target.http.url", "the host must be ASCII: write an internationalized name in its xn-- form")
	}
	for k, v := range h.Headers {
		if !headerName.MatchString(k) || strings.ContainsAny(v, "\r\n") {
			return fieldErr("target.http.headers", "invalid header %q", k)
		}
		if reservedHeader(k) {
			return fieldErr("target.http.headers", "header %q is set by the scheduler", k)
		}
	}
	if ref := h.SecretRef; ref != nil {
		if !secret.ValidName(ref.Name) {
			return fieldErr("target.http.secretRef.name", "must be a Secret key: 1-253 of [-._a-zA-Z0-9], not . or ..*")
		}
		if ref.Header == "" {
			ref.Header = DefaultSecretHeader
		}
		if !headerName.MatchString(ref.Header) {
			return fieldErr("target.http.secretRef.header", "invalid header name %q", ref.Header)
		}
		if reservedHeader(ref.Header) {
			return fieldErr("target.http.secretRef.header", "header %q is set by the scheduler", ref.Header)
		}
		for k := range h.Headers {
			if strings.EqualFold(k, ref.Header) {
				return fieldErr("target.http.secretRef.header", "header %q is also in target.http.headers", ref.Header)
			}
		}
		if len(ref.Prefix) > 256 || strings.ContainsFunc(ref.Prefix, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			return fieldErr("target.http.secretRef.prefix", "at most 256 bytes without control characters")
		}
	}
	if len(t.Payload) > 0 && h.Body != "" {
		return fieldErr("target.payload", "give either payload or http.body, not both")
	}
	if len(t.Payload)+len(h.Body) > MaxPayloadBytes {
		return fieldErr("target.payload", "larger than %d bytes; pass a reference instead", MaxPayloadBytes)
	}
	if g != nil {
		if err := g.CheckURL(ctx, h.URL); err != nil {
			return fieldErr("target.http.url", "%v", err)
		}
	}
	return nil
}

// reservedHeader reports headers the scheduler sets itself.
func reservedHeader(k string) bool {
	for _, r := range []string{"Idempotency-Key", "Host", "Content-Length"} {
		if strings.EqualFold(k, r) {
			return true
		}
	}
	return false
}

func (e *Execution) normalize() error {
	if e.TimeoutSeconds == 0 {
		e.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if e.TimeoutSeconds < 1 || e.TimeoutSeconds > 24*3600 {
		return fieldErr("execution.timeoutSeconds", "must be 1..86400")
	}
	r := &e.Retry
	if r.MaxAttempts == 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.MaxAttempts < 1 || r.MaxAttempts > 100 {
		return fieldErr("execution.retry.maxAttempts", "must be 1..100")
	}
	if r.InitialBackoffMs == 0 {
		r.InitialBackoffMs = DefaultInitialBackoffMs
	}
	if r.MaxBackoffMs == 0 {
		r.MaxBackoffMs = max(DefaultMaxBackoffMs, r.InitialBackoffMs)
	}
	if r.InitialBackoffMs < 1 || r.MaxBackoffMs < r.InitialBackoffMs || r.MaxBackoffMs > 24*3600*1000 {
		return fieldErr("execution.retry", "need 1 <= initialBackoffMs <= maxBackoffMs <= 86400000")
	}
	switch e.ConcurrencyPolicy {
	case "":
		e.ConcurrencyPolicy = ConcurrencyAllow
	case ConcurrencyAllow, ConcurrencyForbid, ConcurrencyReplace:
	default:
		return fieldErr("execution.concurrencyPolicy", "want ALLOW, FORBID or REPLACE")
	}
	switch e.Priority {
	case "":
		e.Priority = PriorityNormal
	case PriorityHigh, PriorityNormal, PriorityLow:
	default:
		return fieldErr("execution.priority", "want HIGH, NORMAL or LOW")
	}
	if e.JitterSeconds < 0 || e.JitterSeconds > MaxJitterSeconds {
		return fieldErr("execution.jitterSeconds", "must be 0..%d", MaxJitterSeconds)
	}
	if e.MaxDeferSeconds == 0 {
		e.MaxDeferSeconds = DefaultMaxDeferSeconds
	}
	if e.MaxDeferSeconds < 1 || e.MaxDeferSeconds > MaxMaxDeferSeconds {
		return fieldErr("execution.maxDeferSeconds", "must be 1..%d", MaxMaxDeferSeconds)
	}
	switch e.MisfirePolicy {
	case "":
		e.MisfirePolicy = MisfireFireOnce
	case MisfireFireOnce, MisfireSkip, MisfireFireAll:
	default:
		return fieldErr("execution.misfirePolicy", "want FIRE_ONCE, SKIP or FIRE_ALL")
	}
	if e.MisfireCap == 0 {
		e.MisfireCap = DefaultMisfireCap
	}
	if e.MisfireCap < 1 || e.MisfireCap > 1000 {
		return fieldErr("execution.misfireCap", "must be 1..1000")
	}
	return nil
}

// loadZone loads an IANA zone; "Local" is refused (it depends on the host).
// zones caches loaded zones: time.LoadLocation reads and parses the
// zone file on every call, and a runner computes next slots per run.
var zones sync.Map // name → *time.Location

func loadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New("jobspec: Local is not an IANA zone")
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	zones.Store(name, l)
	return l, nil
}

// Location is the zone the schedule is read in (UTC unless CRON says).
func (s *Spec) Location() *time.Location {
	if s.Schedule.Type == TypeCron {
		if l, err := loadZone(s.Schedule.TimeZone); err == nil {
			return l
		}
	}
	return time.UTC
}

// NextAfter returns the first slot strictly after t, or ok=false when the
// schedule has no more (ONE_OFF, past endAt). Slots are whole seconds.
// The spec must be normalized.
func (s *Spec) NextAfter(t time.Time) (time.Time, bool) {
	sc := s.Schedule
	var next time.Time
	switch sc.Type {
	case TypeOneOff:
		if !sc.At.After(t) {
			return time.Time{}, false
		}
		next = sc.At.Truncate(time.Second)
	case TypeCron:
		e, err := cron.Parse(sc.Expression)
		if err != nil {
			return time.Time{}, false
		}
		if sc.StartAt != nil && t.Before(*sc.StartAt) {
			t = sc.StartAt.Add(-time.Nanosecond)
		}
		var ok bool
		if next, ok = e.Next(t, s.Location()); !ok {
			return time.Time{}, false
		}
	case TypeFixedRate:
		d, err := ParseISODuration(sc.Every)
		if err != nil || d <= 0 {
			return time.Time{}, false
		}
		a := sc.Anchor.Truncate(time.Second)
		if t.Before(a) {
			next = a
		} else {
			next = a.Add((t.Sub(a)/d + 1) * d)
		}
	default:
		return time.Time{}, false
	}
	if sc.EndAt != nil && next.After(*sc.EndAt) {
		return time.Time{}, false
	}
	return next.UTC(), true
}

// First returns the first slot of a schedule created at now. A ONE_OFF in
// the past fires once, immediately (its slot stays the requested time).
func (s *Spec) First(now time.Time) (time.Time, bool) {
	if s.Schedule.Type == TypeOneOff {
		return s.Schedule.At.Truncate(time.Second).UTC(), true
	}
	return s.NextAfter(now)
}

// Recurring reports whether slots chain (everything but ONE_OFF).
func (s *Spec) Recurring() bool { return s.Schedule.Type != TypeOneOff }

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$`)

// ParseISODuration parses the ISO-8601 durations FIXED_RATE accepts:
// PnDTnHnMnS with whole numbers (days are 24 hours).
func ParseISODuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(s)
	if m == nil || s == "P" || s == "PT" {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration like PT5M", s)
	}
	var total time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.ParseInt(m[i+1], 10, 64)
		if err != nil || n > 1e6 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		total += time.Duration(n) * unit
	}
	return total, nil
}

// RunValues are the template values of one run, all from its slot.
type RunValues struct {
	JobID       int64
	ScheduledAt time.Time
}

// Render returns the request body for a run with {{jobId}},
// {{scheduledAt}} (RFC 3339 UTC) and {{scheduledDate}} (the slot's date in
// the job's zone) substituted.
func (s *Spec) Render(v RunValues) []byte {
	var raw []byte
	switch {
	case len(s.Target.Payload) > 0:
		raw = s.Target.Payload
	case s.Target.HTTP != nil:
		raw = []byte(s.Target.HTTP.Body)
	}
	if len(raw) == 0 {
		return nil
	}
	r := strings.NewReplacer(
		"{{jobId}}", strconv.FormatInt(v.JobID, 10),
		"{{scheduledAt}}", FormatSlot(v.ScheduledAt),
		"{{scheduledDate}}", v.ScheduledAt.In(s.Location()).Format(time.DateOnly),
	)
	return []byte(r.Replace(string(bytes.Clone(raw))))
}

// FormatSlot formats a slot for keys and templates: RFC 3339 in UTC
// (fractional seconds only when the slot has them, e.g. manual triggers).
func FormatSlot(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// StartJitter is the delay before a run of slot may start: a stable value
// in [0, jitterSeconds) from an FNV-1a hash of the run's idempotency key,
// so a re-fired or retried run keeps its place in the spread.
func (s *Spec) StartJitter(scheduleID int64, slot time.Time) time.Duration {
	if s.Execution.JitterSeconds <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(IdempotencyKey(scheduleID, slot)))
	span := uint64(s.Execution.JitterSeconds) * uint64(time.Second/time.Millisecond)
	return time.Duration(h.Sum64()%span) * time.Millisecond
}

// IdempotencyKey is the key every delivery of a run carries.
func IdempotencyKey(scheduleID int64, slot time.Time) string {
	return strconv.FormatInt(scheduleID, 10) + ":" + FormatSlot(slot)
}

// asciiHost reports whether host is plain ASCII. The guard checks the host
// as written, but net/http dials a non-ASCII host in its IDNA form, which
// may be another name ("İ" lowercases to "i" but is not "i" in IDNA).
func asciiHost(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] >= 0x80 {
			return false
		}
	}
	return true
}
