package compile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/portico-io/portico/controlplane/spec"
)

// benchKeys is the API-key count of the compile benchmarks
// (PORTICO_BENCH_KEYS, default 100,000).
var benchKeys = func() int {
	if n, err := strconv.Atoi(os.Getenv("PORTICO_BENCH_KEYS")); err == nil && n > 0 {
		return n
	}
	return 100_000
}()

// BenchmarkCompileAPIKeys compiles the echo config with benchKeys API keys: the
// cost that grows with tenants (validation, sharding, hashing).
func BenchmarkCompileAPIKeys(b *testing.B) {
	cfg, opts := loadCase(b, "testdata/in/minimal_echo.yaml")
	for i := range benchKeys {
		sum := sha256.Sum256(fmt.Appendf(nil, "key-%d", i))
		id := fmt.Sprintf("k%06d", i)
		cfg.APIKeys.Set(id, &spec.APIKey{Name: id, Consumer: "acme", SHA256: hex.EncodeToString(sum[:])})
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := Compile(cfg, opts); err != nil {
			b.Fatal(err)
		}
	}
}
