//go:build tools

// Prometheus (github.com/prometheus/prometheus, Apache-2.0), in a module of its own: the
// monitoring tests run its `prometheus` server against the operator on the local cluster and its
// `promtool` over the shipped alerting rules (tests/monitoring.rs, tests/e2e_prometheus.rs).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
