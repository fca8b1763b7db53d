package compile

import (
	"fmt"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

// BenchmarkCompileOneKeyChange compiles the version that adds one API key
// to benchKeys keys: a full Compile rebuilds every shard, a Compiler that
// compiled the version before rebuilds one. Building the successor config
// (the store's copy-on-write) is not timed.
func BenchmarkCompileOneKeyChange(b *testing.B) {
	for _, mode := range []string{"full", "incremental"} {
		b.Run(mode, func(b *testing.B) {
			cfg, opts := withKeys(b, benchKeys)
			c := NewCompiler(opts)
			if _, err := c.Compile(cfg); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				b.StopTimer()
				cfg = next(cfg)
				id := fmt.Sprintf("added%d", i)
				cfg.APIKeys.Set(id, &spec.APIKey{Name: id, Consumer: "acme", SHA256: hashOf(id)})
				i++
				b.StartTimer()
				var err error
				if mode == "full" {
					_, err = Compile(cfg, opts)
				} else {
					_, err = c.Compile(cfg)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
