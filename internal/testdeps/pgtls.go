package testdeps

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pgHBA admits TLS connections from loopback that present a client
// certificate signed by the server's CA, and nothing else: no plaintext
// line, no Unix socket line.
const pgHBA = "hostssl all all 127.0.0.1/32 trust clientcert=verify-ca\n"

// pgStartTimeout bounds initdb, pg_ctl start and pg_ctl stop each.
const pgStartTimeout = 60 * time.Second

// PostgresTLS starts a private, throwaway Postgres server for t that only
// accepts TLS: it presents serverCertPEM/serverKeyPEM, and requires a
// client certificate signed by caCertPEM (pg_hba.conf: hostssl with
// clientcert=verify-ca, trust, user postgres; no plaintext line). It
// returns the address it listens on, 127.0.0.1:<port>; clients that verify
// the host name must use a name the server certificate carries. The server
// is stopped (immediate mode) and its files removed when t ends.
//
// The server programs come from PORTICO_TEST_PG_BINDIR, else the newest
// /usr/lib/postgresql/<version>/bin (where make deps installs them).
// Without them t is skipped, or failed in CI. Postgres refuses to run as
// root, so as root the server runs as the postgres user (which make deps
// creates) in a directory under os.TempDir() owned by it.
func PostgresTLS(t testing.TB, caCertPEM, serverCertPEM, serverKeyPEM []byte) string {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		unavailable(t, "postgres server programs", "PORTICO_TEST_PG_BINDIR", err)
	}
	cred, err := pgCredential()
	if err != nil {
		skipOrFail(t, fmt.Sprintf("testdeps: %v; run `make deps`, which creates it", err))
	}
	dir, err := os.MkdirTemp("", "portico-pgtls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("testdeps: remove %s: %v", dir, err)
		}
	})
	files := map[string][]byte{"ca.crt": caCertPEM, "server.crt": serverCertPEM, "server.key": serverKeyPEM}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := chownTree(dir, cred); err != nil {
		t.Fatalf("testdeps: hand %s to the postgres user: %v", dir, err)
	}
	data := filepath.Join(dir, "data")
	if out, err := pgRun(bin, "initdb", cred, dir, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		t.Fatalf("testdeps: initdb in %s (is %s reachable by the postgres user?): %v\n%s", data, dir, err, out)
	}
	if err := pgWriteAs(filepath.Join(data, "pg_hba.conf"), []byte(pgHBA), cred); err != nil {
		t.Fatal(err)
	}

	// The free port may be taken between our probe and the server's bind;
	// a second pick is then almost sure to work.
	var (
		addr  string
		start error
		out   []byte
	)
	logFile := filepath.Join(dir, "server.log")
	for attempt := 0; attempt < 3; attempt++ {
		port, err := PickPort()
		if err != nil {
			t.Fatal(err)
		}
		conf := pgConf(dir, port)
		if err := pgWriteAs(filepath.Join(data, "postgresql.auto.conf"), []byte(conf), cred); err != nil {
			t.Fatal(err)
		}
		out, start = pgRun(bin, "pg_ctl", cred, dir, "-D", data, "-l", logFile, "-w", "-t", "60", "start")
		if start == nil {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			break
		}
		if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "already in use") {
			break
		}
	}
	if start != nil {
		// pg_ctl may have given up waiting on a server that did start.
		_, _ = pgRun(bin, "pg_ctl", cred, dir, "-D", data, "-m", "immediate", "-w", "stop")
		log, _ := os.ReadFile(logFile)
		t.Fatalf("testdeps: pg_ctl start: %v\n%s\nserver log:\n%s", start, out, log)
	}
	t.Cleanup(func() {
		if out, err := pgRun(bin, "pg_ctl", cred, dir, "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Errorf("testdeps: pg_ctl stop: %v\n%s", err, out)
		}
	})
	return addr
}

// pgConf is the server's settings: loopback TCP only (no Unix socket, so
// nothing outside the temporary directory is needed), TLS with the files
// PostgresTLS wrote, and durability off for speed.
func pgConf(dir string, port int) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return strings.Join([]string{
		"listen_addresses = '127.0.0.1'",
		"port = " + strconv.Itoa(port),
		"unix_socket_directories = ''",
		"ssl = on",
		"ssl_cert_file = " + q(filepath.Join(dir, "server.crt")),
		"ssl_key_file = " + q(filepath.Join(dir, "server.key")),
		"ssl_ca_file = " + q(filepath.Join(dir, "ca.crt")),
		"fsync = off",
		"synchronous_commit = off",
		"full_page_writes = off",
		"",
	}, "\n")
}

// pgBinDir returns the directory holding initdb and pg_ctl:
// PORTICO_TEST_PG_BINDIR, else the newest /usr/lib/postgresql/*/bin, as
// e2e/scripts/deps.sh picks it.
func pgBinDir() (string, error) {
	if d := os.Getenv("PORTICO_TEST_PG_BINDIR"); d != "" {
		return d, pgHasPrograms(d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if pgHasPrograms(d) == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb and pg_ctl in /usr/lib/postgresql/*/bin")
}

func pgHasPrograms(dir string) error {
	for _, p := range []string{"initdb", "pg_ctl", "postgres"} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			return err
		}
		if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", filepath.Join(dir, p))
		}
	}
	return nil
}

// pgCredential is who the server runs as: nil (this process's user) unless
// we are root, then the postgres user.
func pgCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user for the server: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// pgRun runs a program of bin as cred (nil: as ourselves) in dir.
func pgRun(bin, prog string, cred *syscall.Credential, dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgStartTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, prog), args...)
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return cmd.CombinedOutput()
}

// pgWriteAs writes a file the server reads, owned by cred when set.
func pgWriteAs(path string, b []byte, cred *syscall.Credential) error {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}

// chownTree gives dir and everything in it to cred, when set.
func chownTree(dir string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, int(cred.Uid), int(cred.Gid))
	})
}
