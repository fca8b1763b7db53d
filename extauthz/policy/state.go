package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/internal/atomicfile"
)

// StateFile is the name of the persisted policy inside the state directory.
const StateFile = "policy.json"

// state is the on-disk form: per type, the version and each resource as
// the serialized google.protobuf.Any (base64 in JSON).
type state struct {
	SavedAt time.Time                `json:"savedAt"`
	Types   map[string]persistedType `json:"types"`
}

type persistedType struct {
	Version   string   `json:"version"`
	Resources [][]byte `json:"resources"`
}

// Save writes res to dir atomically (temp file, fsync, rename), so a crash
// leaves either the old or the new policy, never a torn one. The file holds
// no secrets: API keys are only hashes.
func Save(dir string, res Resources, now time.Time) error {
	st := state{SavedAt: now.UTC(), Types: map[string]persistedType{}}
	for t, tr := range res {
		pt := persistedType{Version: tr.Version, Resources: [][]byte{}}
		for _, a := range tr.Resources {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(a)
			if err != nil {
				return fmt.Errorf("policy: save: %w", err)
			}
			pt.Resources = append(pt.Resources, b)
		}
		st.Types[t] = pt
	}
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, StateFile), b, 0o600); err != nil {
		return fmt.Errorf("policy: save: %w", err)
	}
	return nil
}

// Load reads the resources Save wrote to dir. It returns ErrNoState when
// there is none.
func Load(dir string) (Resources, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoState
	}
	if err != nil {
		return nil, fmt.Errorf("policy: load: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("policy: load %s: %w", StateFile, err)
	}
	res := Resources{}
	for t, pt := range st.Types {
		tr := TypeResources{Version: pt.Version}
		for _, raw := range pt.Resources {
			a := &anypb.Any{}
			if err := proto.Unmarshal(raw, a); err != nil {
				return nil, fmt.Errorf("policy: load %s: %w", StateFile, err)
			}
			tr.Resources = append(tr.Resources, a)
		}
		res[t] = tr
	}
	return res, nil
}
