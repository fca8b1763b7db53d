// Package logging builds the process-wide slog.Logger: JSON in production,
// text for `make run`.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// New returns a logger writing to w. format is "json" or "text"; level is
// debug, info, warn or error.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("logging: bad level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "", "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("logging: bad format %q (json or text)", format)
}

// Discard is a logger that drops everything, for tests and defaults.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
