package redlockd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Test harness: real redlockd daemons (and, for the lost test, real
// redis-servers), each bounded in time and always stopped.

const (
	startTimeout = 15 * time.Second
	stopTimeout  = 5 * time.Second
	callTimeout  = 10 * time.Second
)

// daemonBin returns the daemon to run, skipping the test when it or
// redis-server is missing. It is a private copy of REDLOCKD_BIN (default
// <repo>/build/sidecar/redlockd), made once per run: a rebuild, or a
// "pkill -f build/sidecar/redlockd" elsewhere on the machine, during the
// run does not hit the daemons under test.
func daemonBin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("REDLOCKD_BIN")
	if bin == "" {
		abs, err := filepath.Abs(filepath.Join("..", "..", "build", "sidecar", "redlockd"))
		if err != nil {
			t.Fatal(err)
		}
		bin = abs
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Skipf("redlockd binary not found at %s (build it: meson setup build && ninja -C build, or set REDLOCKD_BIN)", bin)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not found in PATH")
	}
	binCopy.once.Do(func() { binCopy.path, binCopy.err = copyBinary(bin) })
	if binCopy.err != nil {
		t.Fatal(binCopy.err)
	}
	return binCopy.path
}

var binCopy struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func copyBinary(src string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "rlgobin")
	if err != nil {
		return "", err
	}
	binCopy.dir = dir
	dst := filepath.Join(dir, "redlockd")
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		return "", err
	}
	return dst, nil
}

// syncBuffer collects a child's output for failure reports.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 4<<20 {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// Children are started with Pdeathsig, which fires when the *thread* that
// forked them exits; all of them are forked from one goroutine locked to a
// thread that lives as long as the test binary.
type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var spawnCh = make(chan spawnReq)

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread stays
		for r := range spawnCh {
			r.done <- r.cmd.Start()
		}
	}()
}

func startChild(cmd *exec.Cmd, sig syscall.Signal) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: sig}
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnCh <- r
	return <-r.done
}

type daemon struct {
	cmd    *exec.Cmd
	sock   string
	dir    string
	out    *syncBuffer
	exited chan struct{}
	waitMu sync.Mutex
	code   int
	once   sync.Once
}

// startDaemon runs redlockd with args plus --socket DIR/d.sock and waits
// until a ping answers. The caller stops it (stop), normally in Cleanup.
func startDaemon(t testing.TB, args ...string) (*daemon, error) {
	bin := daemonBin(t)
	dir, err := os.MkdirTemp("", "rlgo")
	if err != nil {
		return nil, err
	}
	d := &daemon{sock: filepath.Join(dir, "d.sock"), dir: dir, out: &syncBuffer{},
		exited: make(chan struct{}), code: -1}
	args = append(append([]string{}, args...), "--socket", d.sock)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout = d.out
	d.cmd.Stderr = d.out
	// If the test binary dies (go test -timeout), the daemon gets SIGTERM
	// and removes its --dev nodes.
	if err := startChild(d.cmd, syscall.SIGTERM); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		err := d.cmd.Wait()
		d.waitMu.Lock()
		d.code = d.cmd.ProcessState.ExitCode()
		_ = err
		d.waitMu.Unlock()
		close(d.exited)
	}()
	// With --dev, ready means every node up too: the daemon serves from
	// its first moment, and a request that beats its own nodes'
	// connections is answered no_quorum.
	dev := false
	for _, a := range args {
		dev = dev || a == "--dev"
	}
	deadline := time.Now().Add(startTimeout)
	for {
		if pingOnce(d.sock, 500*time.Millisecond) == nil &&
			(!dev || allNodesUp(d.sock, 500*time.Millisecond) == nil) {
			return d, nil
		}
		select {
		case <-d.exited:
			d.stop()
			return nil, fmt.Errorf("redlockd exited during start (code %d):\n%s", d.code, d.out.tail(4000))
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("redlockd did not answer ping within %v:\n%s", startTimeout, d.out.tail(4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustDaemon starts a daemon stopped at the end of the test.
func mustDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d, err := startDaemon(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		code, err := d.stop()
		if err != nil || code != 0 {
			t.Errorf("redlockd stop: exit %d, %v\n%s", code, err, d.out.tail(3000))
		}
		if t.Failed() {
			t.Logf("redlockd output:\n%s", d.out.tail(6000))
		}
	})
	return d
}

// stop sends SIGTERM, waits up to stopTimeout (then SIGKILL) and removes
// the socket directory. It returns the exit code.
func (d *daemon) stop() (int, error) {
	var err error
	d.once.Do(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(stopTimeout):
			err = fmt.Errorf("no exit within %v of SIGTERM; killed", stopTimeout)
			_ = d.cmd.Process.Kill()
			select {
			case <-d.exited:
			case <-time.After(stopTimeout):
			}
		}
		os.RemoveAll(d.dir)
	})
	d.waitMu.Lock()
	defer d.waitMu.Unlock()
	return d.code, err
}

// allNodesUp asks health once and says whether every node is up.
func allNodesUp(sock string, timeout time.Duration) error {
	line, err := requestOnce(sock, "{\"op\":\"health\",\"id\":\"ready\"}\n", timeout)
	if err != nil {
		return err
	}
	var h struct {
		Nodes []struct {
			Up bool `json:"up"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		return err
	}
	if len(h.Nodes) == 0 {
		return fmt.Errorf("health without nodes: %q", line)
	}
	for _, n := range h.Nodes {
		if !n.Up {
			return fmt.Errorf("a node is not up yet: %q", line)
		}
	}
	return nil
}

func requestOnce(sock, req string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("unix", sock, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(req)); err != nil {
		return "", err
	}
	return bufio.NewReader(conn).ReadString('\n')
}

func pingOnce(sock string, timeout time.Duration) error {
	line, err := requestOnce(sock, "{\"op\":\"ping\",\"id\":\"ready\"}\n", timeout)
	if err != nil {
		return err
	}
	if !strings.Contains(line, `"ok":true`) {
		return fmt.Errorf("ping answered %q", line)
	}
	return nil
}

// Shared --dev daemon for the tests that do not need one of their own;
// stopped by TestMain. Tests on it use unique resource names.
var shared struct {
	once sync.Once
	d    *daemon
	err  error
}

func sharedDaemon(t *testing.T) *daemon {
	t.Helper()
	daemonBin(t) // skips when missing
	// A node timeout above the 100 ms default: the suite may share a small
	// machine with builds and benchmarks, and a burst of 200 calls should
	// not fail with no_quorum because a redis-server was descheduled.
	shared.once.Do(func() { shared.d, shared.err = startDaemon(t, "--dev", "--node-timeout-ms", "1000") })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.d
}

func TestMain(m *testing.M) {
	if os.Getenv(leaderHelperEnv) != "" {
		os.Exit(leaderHelper()) // a contender process of leader_test.go
	}
	code := m.Run()
	if shared.d != nil {
		if c, err := shared.d.stop(); err != nil || c != 0 {
			fmt.Fprintf(os.Stderr, "shared redlockd stop: exit %d, %v\n%s\n", c, err, shared.d.out.tail(4000))
			if code == 0 {
				code = 1
			}
		} else if code != 0 {
			fmt.Fprintf(os.Stderr, "shared redlockd output:\n%s\n", shared.d.out.tail(6000))
		}
	}
	if binCopy.dir != "" {
		os.RemoveAll(binCopy.dir)
	}
	os.Exit(code)
}

// dial connects a client closed at the end of the test.
func dial(t *testing.T, d *daemon) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	c, err := Dial(ctx, d.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

var resSeq struct {
	sync.Mutex
	n int
}

// rname is a resource name unique to this run.
func rname(t *testing.T) string {
	resSeq.Lock()
	defer resSeq.Unlock()
	resSeq.n++
	return fmt.Sprintf("go:%s:%d:%d", t.Name(), os.Getpid(), resSeq.n)
}

// ---- own redis-servers (for tests that pause nodes) ----------------------

type redisNode struct {
	cmd    *exec.Cmd
	sock   string
	exited chan struct{}
}

type cluster struct {
	dir   string
	nodes []*redisNode
}

// startCluster runs n redis-servers on unix sockets in a temp dir, all
// stopped (SIGCONT, SIGTERM, SIGKILL) and removed at the end of the test.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	daemonBin(t)
	dir, err := os.MkdirTemp("", "rlgoc")
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{dir: dir}
	t.Cleanup(func() { cl.stop(t) })
	for i := 1; i <= n; i++ {
		sock := filepath.Join(dir, fmt.Sprintf("n%d.sock", i))
		cmd := exec.Command("redis-server", "--port", "0", "--unixsocket", sock,
			"--save", "", "--appendonly", "no", "--dir", dir)
		if err := startChild(cmd, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		node := &redisNode{cmd: cmd, sock: sock, exited: make(chan struct{})}
		go func() { _ = cmd.Wait(); close(node.exited) }()
		cl.nodes = append(cl.nodes, node)
	}
	for _, node := range cl.nodes {
		deadline := time.Now().Add(startTimeout)
		for redisPing(node.sock) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("redis-server on %s did not answer PING", node.sock)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return cl
}

func redisPing(sock string) error {
	conn, err := net.DialTimeout("unix", sock, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New("unexpected " + line)
	}
	return nil
}

func (cl *cluster) nodeArgs() []string {
	var args []string
	for _, n := range cl.nodes {
		args = append(args, "--node", "unix://"+n.sock)
	}
	return args
}

func (cl *cluster) signal(sig syscall.Signal, idx ...int) {
	for _, i := range idx {
		_ = cl.nodes[i].cmd.Process.Signal(sig)
	}
}

func (cl *cluster) stop(t *testing.T) {
	for _, n := range cl.nodes {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, n := range cl.nodes {
		select {
		case <-n.exited:
		case <-time.After(stopTimeout):
			t.Errorf("redis-server %s ignored SIGTERM; killing", n.sock)
			_ = n.cmd.Process.Kill()
			select {
			case <-n.exited:
			case <-time.After(stopTimeout):
			}
		}
	}
	os.RemoveAll(cl.dir)
}
