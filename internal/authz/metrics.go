package authz

import (
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of the middleware, the only values of the metric's label.
const (
	ResultOK              = "ok"
	ResultUnauthenticated = "unauthenticated"
	ResultForbidden       = "forbidden"
	ResultBadHost         = "bad_host"
	ResultCrossOrigin     = "cross_origin"
	ResultUnavailable     = "unavailable"
)

var results = []string{ResultOK, ResultUnauthenticated, ResultForbidden, ResultBadHost, ResultCrossOrigin, ResultUnavailable}

// Metrics counts the middleware's decisions by result. One per component;
// several Routers of a component may share it.
type Metrics struct {
	requests *prometheus.CounterVec
}

var componentRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// NewMetrics registers portico_<component>_auth_requests_total{result}.
func NewMetrics(reg prometheus.Registerer, component string) (*Metrics, error) {
	if !componentRE.MatchString(component) {
		return nil, fmt.Errorf("%w: metrics component %q", ErrConfig, component)
	}
	m := &Metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portico_" + component + "_auth_requests_total",
		Help: "Requests by authentication and authorization result.",
	}, []string{"result"})}
	for _, r := range results {
		m.requests.WithLabelValues(r)
	}
	if err := reg.Register(m.requests); err != nil {
		return nil, fmt.Errorf("authz: register metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) observe(result string) {
	if m != nil {
		m.requests.WithLabelValues(result).Inc()
	}
}
