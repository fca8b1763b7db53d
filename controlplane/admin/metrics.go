package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/portico-io/portico/internal/apierror"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		// route is the ServeMux pattern, so label values are bounded.
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_controlplane_admin_requests_total",
			Help: "Admin API requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portico_controlplane_admin_request_duration_seconds",
			Help:    "Admin API request latency by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("admin: metrics already registered; give each handler its own registry")
			}
			return nil, err
		}
	}
	return m, nil
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument wraps an endpoint with error rendering, metrics and logs.
func (h *Handler) instrument(route string, fn HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := h.timeNow()
		sw := &statusWriter{ResponseWriter: w}
		err := fn(sw, r)
		if err != nil {
			apiErr, known := toAPIError(err)
			if !known {
				h.log.Error("admin request failed", "method", r.Method, "route", route, "path", r.URL.Path, "err", err)
			}
			writeJSON(sw, apiErr.Status, apierror.Body(apiErr))
		}
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		d := h.timeNow().Sub(start)
		h.metrics.requests.WithLabelValues(methodLabel(r.Method), route, strconv.Itoa(sw.status)).Inc()
		h.metrics.latency.WithLabelValues(methodLabel(r.Method), route).Observe(d.Seconds())
		h.log.LogAttrs(r.Context(), slog.LevelDebug, "admin request", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Int("status", sw.status), slog.Duration("duration", d),
			slog.String("author", r.Header.Get(HeaderAuthor)))
	})
}

// methodLabel bounds the method label: clients can send any method token.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}
