// Package envflag defines command-line flags whose default comes from a
// PORTICO_* environment variable, so every setting is both a flag and an
// env var (flag wins, then env, then the built-in default).
package envflag

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// String defines a string flag defaulting to $env, else def.
func String(fs *flag.FlagSet, name, env, def, usage string) *string {
	if v, ok := os.LookupEnv(env); ok {
		def = v
	}
	return fs.String(name, def, fmt.Sprintf("%s (env %s)", usage, env))
}

// Uint defines a uint flag defaulting to $env, else def. A malformed env
// value stops the program with a clear message rather than being ignored.
func Uint(fs *flag.FlagSet, name, env string, def uint, usage string) *uint {
	if v, ok := os.LookupEnv(env); ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: not a non-negative integer\n", env, v)
			os.Exit(2)
		}
		def = uint(n)
	}
	return fs.Uint(name, def, fmt.Sprintf("%s (env %s)", usage, env))
}

// Duration defines a duration flag defaulting to $env, else def.
func Duration(fs *flag.FlagSet, name, env string, def time.Duration, usage string) *time.Duration {
	if v, ok := os.LookupEnv(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: not a duration\n", env, v)
			os.Exit(2)
		}
		def = d
	}
	return fs.Duration(name, def, fmt.Sprintf("%s (env %s)", usage, env))
}

// Bool defines a bool flag defaulting to $env (strconv.ParseBool: 1, t,
// true, 0, f, false …), else def.
func Bool(fs *flag.FlagSet, name, env string, def bool, usage string) *bool {
	if v, ok := os.LookupEnv(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: not a boolean\n", env, v)
			os.Exit(2)
		}
		def = b
	}
	return fs.Bool(name, def, fmt.Sprintf("%s (env %s)", usage, env))
}

// Float64 defines a float64 flag defaulting to $env, else def.
func Float64(fs *flag.FlagSet, name, env string, def float64, usage string) *float64 {
	if v, ok := os.LookupEnv(env); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s=%q: not a number\n", env, v)
			os.Exit(2)
		}
		def = f
	}
	return fs.Float64(name, def, fmt.Sprintf("%s (env %s)", usage, env))
}
