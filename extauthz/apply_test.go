package extauthz

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/portico-io/portico/extauthz/authz"
	"github.com/portico-io/portico/extauthz/policy"
	authv1 "github.com/portico-io/portico/proto/portico/auth/v1"
)

// shardsOf spreads keys (secret "secret-<i>" for keys[i]) over their
// ApiKeyShards, as the control plane does; extra keys go to the shard
// named by into, whatever their hash.
func shardsOf(t *testing.T, keys map[int]*authv1.ApiKey, extra *authv1.ApiKey, into byte) []*anypb.Any {
	t.Helper()
	shards := map[byte]*authv1.ApiKeyShard{}
	add := func(b byte, k *authv1.ApiKey) {
		if shards[b] == nil {
			shards[b] = &authv1.ApiKeyShard{Name: policy.ShardName(b)}
		}
		shards[b].Keys = append(shards[b].Keys, k)
	}
	for i := range len(keys) + 1 {
		if k := keys[i]; k != nil {
			add(k.GetSha256()[0], k)
		}
	}
	if extra != nil {
		add(into, extra)
	}
	var out []*anypb.Any
	for _, s := range shards {
		a, err := anypb.New(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func apiKeyCheck(secret string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: "/echo", Host: "api.test", Headers: map[string]string{":path": "/echo", "x-api-key": secret},
		}},
		ContextExtensions: map[string]string{authz.CtxRoute: "echo", authz.CtxMode: authz.ModeAPIKey},
	}}
}

func allowsKey(t *testing.T, srv *authz.Server, i int) bool {
	t.Helper()
	r, err := srv.Check(context.Background(), apiKeyCheck(fmt.Sprint("secret-", i)))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetOkResponse() == nil && !strings.Contains(r.GetDeniedResponse().GetBody(), authz.ReasonInvalidAPIKey) {
		t.Fatalf("key %d denied for another reason: %s", i, r.GetDeniedResponse().GetBody())
	}
	return r.GetOkResponse() != nil
}

// TestApplyShardUpdates drives the applier as the xDS client does: a shard
// holding another shard's key is NACKed with the policy in force kept; a
// key deleted from its shard is refused once the update is applied, its
// shard's other keys and the other shards' still allowed; the saver
// persists the newest policy in the background, and it boots.
func TestApplyShardUpdates(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	saved := make(chan *policy.Policy, 8)
	saver, err := policy.NewSaver(policy.SaverConfig{Dir: dir, Saved: func(p *policy.Policy, err error) {
		if err != nil {
			t.Errorf("save: %v", err)
		}
		select {
		case saved <- p:
		case <-ctx.Done():
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	saverDone := make(chan error, 1)
	go func() { saverDone <- saver.Run(ctx) }()
	defer func() { cancel(); <-saverDone }()

	keys := map[int]*authv1.ApiKey{}
	for i := range 1000 {
		sum := sha256.Sum256([]byte(fmt.Sprint("secret-", i)))
		keys[i] = &authv1.ApiKey{Id: fmt.Sprint("key-", i), Sha256: sum[:], Consumer: "acme"}
	}
	// sibling shares key 0's shard.
	sibling := -1
	for i := 1; i < len(keys); i++ {
		if keys[i].GetSha256()[0] == keys[0].GetSha256()[0] {
			sibling = i
			break
		}
	}
	if sibling < 0 {
		t.Fatal("no key shares key 0's shard")
	}

	ready := make(chan struct{}, 1)
	srv := authz.New(authz.Config{})
	a := &applier{srv: srv, dir: dir, saver: saver, log: slog.New(slog.DiscardHandler), ctx: ctx, onReady: func() { ready <- struct{}{} }}
	for _, u := range []struct {
		typ string
		res []*anypb.Any
	}{{policy.JwtProviderType, nil}, {policy.RevocationListType, nil}, {policy.ApiKeyShardType, shardsOf(t, keys, nil, 0)}} {
		if err := a.apply(u.typ, "1", u.res); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-ready:
	default:
		t.Fatal("not ready with every type applied")
	}
	if !allowsKey(t, srv, 0) || !allowsKey(t, srv, sibling) || !allowsKey(t, srv, 999) {
		t.Fatal("keys refused")
	}

	// Key 1 copied into a shard it does not belong in: NACK, nothing changes.
	in := srv.Policy()
	host := keys[1].GetSha256()[0] + 1
	err = a.apply(policy.ApiKeyShardType, "2", shardsOf(t, keys, &authv1.ApiKey{Id: "intruder", Sha256: keys[1].GetSha256(), Consumer: "mallory"}, host))
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), policy.ShardName(host)) {
		t.Fatalf("foreign key: err %v, want ErrInvalid naming %s", err, policy.ShardName(host))
	}
	if srv.Policy() != in || !a.ready() || !allowsKey(t, srv, 1) {
		t.Fatal("the policy in force changed after a NACK")
	}

	// Key 0 deleted: refused at once, everything else still allowed.
	delete(keys, 0)
	if err := a.apply(policy.ApiKeyShardType, "3", shardsOf(t, keys, nil, 0)); err != nil {
		t.Fatal(err)
	}
	if allowsKey(t, srv, 0) {
		t.Fatal("deleted key still allowed")
	}
	if !allowsKey(t, srv, sibling) || !allowsKey(t, srv, 999) {
		t.Fatal("keys lost with the deleted one")
	}

	// Persisted in the background: wait for version 3 on disk, then boot.
	deadline := time.After(30 * time.Second)
	for p := (*policy.Policy)(nil); p == nil || p.Versions[policy.ApiKeyShardType] != "3"; {
		select {
		case p = <-saved:
		case <-deadline:
			t.Fatal("version 3 not persisted in 30s")
		}
	}
	srv2 := authz.New(authz.Config{})
	booted := make(chan struct{}, 1)
	b := &applier{srv: srv2, dir: dir, log: slog.New(slog.DiscardHandler), ctx: ctx, onReady: func() { booted <- struct{}{} }}
	if err := b.boot(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-booted:
	default:
		t.Fatal("not ready after booting from disk")
	}
	if allowsKey(t, srv2, 0) || !allowsKey(t, srv2, sibling) || !allowsKey(t, srv2, 999) {
		t.Fatal("the booted policy is not the newest")
	}
}
