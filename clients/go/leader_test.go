package redlockd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// Leader election: one leader at a time across processes and two daemons
// over the same five redis-servers, handover after a kill, a clean Resign
// handing over at once, and the end of leadership cancelling its Context.
// Contenders are this test binary run again (TestMain sees leaderHelperEnv).

const leaderHelperEnv = "REDLOCKD_GO_LEADER_HELPER"

// monoNS is CLOCK_MONOTONIC, one clock for every process on the machine.
func monoNS() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Sec*1e9 + ts.Nsec
}

// leaderHelper leads TERMS times, each term HOLD_MS long (< 0: until
// killed), appending "start <ns> <fence> <pid>" and "end <ns> <pid>" to OUT.
func leaderHelper() int {
	args := strings.Split(os.Getenv(leaderHelperEnv), "|")
	sock, res, out := args[0], args[1], args[2]
	terms, _ := strconv.Atoi(args[3])
	hold, _ := strconv.Atoi(args[4])
	ttl, _ := strconv.Atoi(args[5])
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	c, err := Dial(ctx, sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer c.Close()
	for i := 0; i < terms; i++ {
		ld, err := c.Campaign(ctx, res, time.Duration(ttl)*time.Millisecond)
		if err != nil {
			fmt.Fprintln(os.Stderr, "campaign:", err)
			return 1
		}
		fmt.Fprintf(f, "start %d %d %d\n", monoNS(), ld.Fence(), os.Getpid())
		var t <-chan time.Time
		if hold >= 0 {
			t = time.After(time.Duration(hold) * time.Millisecond)
		}
		select {
		case <-t:
		case <-ld.Done():
		}
		fmt.Fprintf(f, "end %d %d\n", monoNS(), os.Getpid())
		if err := ld.Resign(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "resign:", err)
			return 1
		}
	}
	return 0
}

type term struct {
	start, end, fence int64
	pid               string
}

func readTerms(t *testing.T, out string) []term {
	data, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	open := map[string]term{}
	var done []term
	for _, ln := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(ln)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		if f[0] == "start" {
			fence, _ := strconv.ParseInt(f[2], 10, 64)
			open[f[3]] = term{start: n, fence: fence, pid: f[3]}
		} else {
			tm := open[f[2]]
			delete(open, f[2])
			tm.end = n
			done = append(done, tm)
		}
	}
	for _, tm := range open {
		done = append(done, tm)
	}
	sort.Slice(done, func(i, j int) bool { return done[i].start < done[j].start })
	return done
}

func startContender(t *testing.T, sock, res, out string, terms, holdMS, ttlMS int) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s|%d|%d|%d", leaderHelperEnv, sock, res, out, terms, holdMS, ttlMS))
	cmd.Stderr = os.Stderr
	if err := startChild(cmd, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	})
	return cmd
}

func waitTerms(t *testing.T, out string, n int, within time.Duration) []term {
	deadline := time.Now().Add(within)
	for {
		if got := readTerms(t, out); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d terms within %v: %+v", n, within, readTerms(t, out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLeaderOneAtATimeAcrossProcessesAndDaemons(t *testing.T) {
	cl := startCluster(t, 5)
	d1 := mustDaemon(t, cl.nodeArgs()...)
	d2 := mustDaemon(t, cl.nodeArgs()...)
	out := filepath.Join(t.TempDir(), "terms")
	res := rname(t)
	const ttl = 5000
	var cmds []*exec.Cmd
	for _, d := range []*daemon{d1, d2, d1, d2} {
		cmds = append(cmds, startContender(t, d.sock, res, out, 3, 150, ttl))
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("contender: %v", err)
		}
	}
	terms := readTerms(t, out)
	if len(terms) != 12 {
		t.Fatalf("%d terms: %+v", len(terms), terms)
	}
	pids := map[string]bool{}
	for i, cur := range terms {
		pids[cur.pid] = true
		if i == 0 {
			continue
		}
		prev := terms[i-1]
		if cur.start < prev.end {
			t.Fatalf("two leaders at once: %+v then %+v", prev, cur)
		}
		if cur.fence <= prev.fence {
			t.Fatalf("fence did not grow: %+v then %+v", prev, cur)
		}
		if gap := time.Duration(cur.start - prev.end); gap > ttl*time.Millisecond/2 {
			t.Fatalf("a resign took %v to hand over (ttl %d ms)", gap, ttl)
		}
	}
	if len(pids) != 4 {
		t.Fatalf("not every contender led: %+v", terms)
	}
}

func TestLeaderHandoverAfterKill(t *testing.T) {
	cl := startCluster(t, 5)
	d1 := mustDaemon(t, cl.nodeArgs()...)
	d2 := mustDaemon(t, cl.nodeArgs()...)
	out := filepath.Join(t.TempDir(), "terms")
	res := rname(t)
	const ttl = 2000
	a := startContender(t, d1.sock, res, out, 1, -1, ttl)
	waitTerms(t, out, 1, 20*time.Second)
	startContender(t, d2.sock, res, out, 1, 100, ttl)
	time.Sleep(300 * time.Millisecond)
	if n := len(readTerms(t, out)); n != 1 {
		t.Fatalf("%d terms while the first leader lives", n)
	}
	kill := monoNS()
	_ = a.Process.Kill()
	terms := waitTerms(t, out, 2, 20*time.Second)
	if gap := time.Duration(terms[1].start - kill); gap < 0 || gap > ttl*time.Millisecond {
		t.Fatalf("handover %v after the kill (ttl %d ms)", gap, ttl)
	}
}

func TestLeaderResignAndLost(t *testing.T) {
	cl := startCluster(t, 5)
	d := mustDaemon(t, cl.nodeArgs()...)
	a, b := dial(t, d), dial(t, d)
	res := rname(t)
	ld, err := a.Campaign(tctx(t), res, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Leadership, 1)
	go func() {
		l, err := b.Campaign(tctx(t), res, time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	if err := ld.Resign(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(ld.Err(), ErrReleased) || ld.Context().Err() == nil {
		t.Fatalf("after Resign: %v", ld.Err())
	}
	var next *Leadership
	select {
	case next = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not lead after Resign")
	}
	if next == nil || next.Fence() <= ld.Fence() {
		t.Fatalf("fence did not grow: %d then %v", ld.Fence(), next)
	}
	if since := time.Since(t0); since > 5*time.Second {
		t.Fatalf("handover after Resign took %v (the old ttl was 30 s)", since)
	}
	// The leader's work runs under next.Context(): losing the quorum ends it
	// before the validity would (the daemon sends lost).
	cl.signal(syscall.SIGSTOP, 0, 1, 2)
	defer cl.signal(syscall.SIGCONT, 0, 1, 2)
	select {
	case <-next.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("leadership Context not cancelled when renewal lost the quorum")
	}
	if !errors.Is(next.Err(), ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", next.Err())
	}
	if err := next.Resign(tctx(t)); err != nil {
		t.Fatalf("Resign after loss: %v", err)
	}
	// Campaign gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cl.signal(syscall.SIGCONT, 0, 1, 2)
	hold, err := a.Acquire(tctx(t), res, AcquireOptions{TTL: 5 * time.Second})
	for i := 0; err != nil && i < 50; i++ { // nodes resuming
		time.Sleep(100 * time.Millisecond)
		hold, err = a.Acquire(tctx(t), res, AcquireOptions{TTL: 5 * time.Second})
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Campaign(ctx, res, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign past its deadline: %v", err)
	}
	_ = hold.Release(tctx(t))
}

// SharedSocketForTest is the shared --dev daemon's socket, for the tests of
// package redlockd_test (the poller example's test).
func SharedSocketForTest(t *testing.T) string { return sharedDaemon(t).sock }
