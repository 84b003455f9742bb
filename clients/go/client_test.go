package redlockd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPingHealth(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
	h, err := c.Health(tctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !h.OK || h.Quorum != 3 || len(h.Nodes) != 5 {
		t.Fatalf("health %+v", h)
	}
	for _, n := range h.Nodes {
		if !n.Up || n.State != "up" || n.Addr == "" || n.Quarantined || n.LastError != "" {
			t.Errorf("node %+v", n)
		}
	}
}

func TestDialSocketFromEnv(t *testing.T) {
	d := sharedDaemon(t)
	t.Setenv("REDLOCKD_SOCKET", d.sock)
	c, err := Dial(tctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("REDLOCKD_SOCKET", "")
	if _, err := os.Stat(DefaultSocket); err == nil {
		t.Skip("a ./redlockd.sock exists here")
	}
	if _, err := Dial(tctx(t), ""); err == nil || !strings.Contains(err.Error(), DefaultSocket) {
		t.Fatalf("Dial with no socket: %v, want an error naming %s", err, DefaultSocket)
	}
}

func TestAcquireRelease(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	start := time.Now()
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Token) != 32 || l.Resource != r || l.Fence != 0 {
		t.Fatalf("lock %+v", l)
	}
	if l.Validity <= 4*time.Second || l.Validity > 5*time.Second {
		t.Fatalf("validity %v for a 5s ttl", l.Validity)
	}
	if dl, ok := l.Deadline(); !ok || dl.Before(start.Add(4*time.Second)) {
		t.Fatalf("deadline %v %v", dl, ok)
	}
	if l.Err() != nil || l.Context().Err() != nil {
		t.Fatal("fresh lock already ended")
	}
	// A second owner is refused while it is held.
	c2 := dial(t, d)
	if _, err := c2.Acquire(tctx(t), r, AcquireOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second acquire: %v, want busy", err)
	}
	if err := c.Release(tctx(t), l); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), ErrReleased) || l.Context().Err() == nil {
		t.Fatalf("after release: Err %v ctx %v", l.Err(), l.Context().Err())
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost closed by Release")
	default:
	}
	// Released for real: the other owner gets it, and a second release is not_held.
	l2, err := c2.Acquire(tctx(t), r, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token == l.Token {
		t.Fatal("token reused")
	}
	if err := c.Release(tctx(t), l); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release: %v, want not_held", err)
	}
	if err := l2.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestBusy(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(tctx(t))
	// Same client, same resource: still another owner.
	_, err = c.Acquire(tctx(t), r, AcquireOptions{})
	var e *Error
	if !errors.As(err, &e) || e.Code != "busy" || e.Message == "" {
		t.Fatalf("acquire: %v, want *Error busy with a message", err)
	}
	// With a short wait, busy comes after about that long.
	start := time.Now()
	_, err = c.Acquire(tctx(t), r, AcquireOptions{Wait: 300 * time.Millisecond})
	if el := time.Since(start); !errors.Is(err, ErrBusy) || el < 250*time.Millisecond || el > 3*time.Second {
		t.Fatalf("acquire with wait: %v after %v", err, el)
	}
}

func TestDoneAfterComplete(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(tctx(t), l, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("after complete: %v", l.Err())
	}
	if _, err := c.Acquire(tctx(t), r, AcquireOptions{}); !errors.Is(err, ErrDone) {
		t.Fatalf("acquire after complete: %v, want done", err)
	}
	// Waiting stops at once on a done resource.
	start := time.Now()
	if _, err := c.Acquire(tctx(t), r, AcquireOptions{Wait: 5 * time.Second}); !errors.Is(err, ErrDone) {
		t.Fatalf("acquire with wait after complete: %v, want done", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("done took %v with wait", el)
	}
	// The lock is gone: complete and release again are not_held.
	if err := c.Complete(tctx(t), l, 0); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second complete: %v", err)
	}
	if err := c.Release(tctx(t), l); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release after complete: %v", err)
	}
	// The done mark expires after keep.
	r2 := rname(t)
	l2, err := c.Acquire(tctx(t), r2, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(tctx(t), l2, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(tctx(t), r2, AcquireOptions{}); !errors.Is(err, ErrDone) {
		t.Fatalf("acquire: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	l3, err := c.Acquire(tctx(t), r2, AcquireOptions{})
	if err != nil {
		t.Fatalf("acquire after keep: %v", err)
	}
	l3.Release(tctx(t))
}

func TestExtend(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	other := dial(t, d)
	r := rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 400 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// No ttl: the one it was taken with.
	v, err := l.Extend(tctx(t), 0)
	if err != nil || v > 400*time.Millisecond || v <= 300*time.Millisecond {
		t.Fatalf("extend with default ttl: %v %v", v, err)
	}
	v, err = c.Extend(tctx(t), l, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v <= 2*time.Second || v > 3*time.Second {
		t.Fatalf("validity after extend %v", v)
	}
	time.Sleep(700 * time.Millisecond) // past the original ttl
	if l.Err() != nil {
		t.Fatalf("extended lock ended: %v", l.Err())
	}
	if _, err := other.Acquire(tctx(t), r, AcquireOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire of an extended lock: %v, want busy", err)
	}
	if err := l.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Extend(tctx(t), l, time.Second); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("extend after release: %v, want not_held", err)
	}
}

func TestExpiryWithoutRenew(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	l, err := c.Acquire(tctx(t), rname(t), AcquireOptions{TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("Lost not closed after the validity of a 100ms lock")
	}
	if !errors.Is(l.Err(), ErrExpired) || l.Context().Err() == nil {
		t.Fatalf("Err %v", l.Err())
	}
	// The client's deadline is conservative: the keys outlive it by the
	// drift allowance and the round trip.
	time.Sleep(200 * time.Millisecond)
	if err := l.Release(tctx(t)); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release of an expired lock: %v", err)
	}
}

func TestFenceIncreasing(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	c2 := dial(t, d)
	r := rname(t)
	var last int64
	for i := 0; i < 10; i++ {
		cl := c
		if i%2 == 1 {
			cl = c2
		}
		l, err := cl.Acquire(tctx(t), r, AcquireOptions{Fence: true, TTL: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence <= last {
			t.Fatalf("fence %d after %d", l.Fence, last)
		}
		last = l.Fence
		if err := l.Release(tctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	// Fences are also increasing across resources (one counter per node).
	l, err := c.Acquire(tctx(t), rname(t), AcquireOptions{Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence <= last {
		t.Fatalf("fence %d on another resource after %d", l.Fence, last)
	}
	l.Release(tctx(t))
}

func TestWait(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	first, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		l   *Lock
		err error
		at  time.Time
	}
	got := make(chan out, 1)
	go func() {
		l, err := c.Acquire(tctx(t), r, AcquireOptions{Wait: 8 * time.Second, TTL: 5 * time.Second})
		got <- out{l, err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case o := <-got:
		t.Fatalf("waiter answered while the lock was held: %+v", o)
	default:
	}
	// Another call on the same connection is not held up by the waiter.
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := first.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		if o.err != nil {
			t.Fatalf("waiter: %v", o.err)
		}
		if lag := o.at.Sub(released); lag > time.Second {
			t.Errorf("waiter got the lock %v after the release", lag)
		}
		if o.l.Token == first.Token {
			t.Fatal("same token")
		}
		o.l.Release(tctx(t))
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never answered")
	}
}

func TestRenewKeepsLock(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	other := dial(t, d)
	r := rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 300 * time.Millisecond, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Deadline(); ok {
		t.Fatal("a renewed lock has no client-side deadline")
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := other.Acquire(tctx(t), r, AcquireOptions{}); !errors.Is(err, ErrBusy) {
			t.Fatalf("at %v: acquire by another: %v, want busy", time.Until(deadline), err)
		}
		select {
		case <-l.Lost():
			t.Fatalf("renewed lock lost: %v", l.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if l.Err() != nil {
		t.Fatal(l.Err())
	}
	if err := l.Release(tctx(t)); err != nil {
		t.Fatalf("release after 1.5s of renewal: %v", err)
	}
	l2, err := other.Acquire(tctx(t), r, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l2.Release(tctx(t))
}

func TestRenewMax(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	other := dial(t, d)
	r := rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 200 * time.Millisecond, Renew: true,
		RenewMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond)
	if _, err := other.Acquire(tctx(t), r, AcquireOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("while renewing: %v", err)
	}
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("Lost not closed after RenewMax")
	}
	if !errors.Is(l.Err(), ErrExpired) {
		t.Fatal(l.Err())
	}
	// The daemon stops renewing too: the lock expires within about a ttl.
	l2, err := other.Acquire(tctx(t), r, AcquireOptions{Wait: 2 * time.Second})
	if err != nil {
		t.Fatalf("after RenewMax + ttl: %v", err)
	}
	l2.Release(tctx(t))
}

func TestConcurrentCalls(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			switch i % 4 {
			case 0:
				errs <- c.Ping(ctx)
			default:
				r := fmt.Sprintf("go:concurrent:%d:%d", os.Getpid(), i)
				l, err := c.Acquire(ctx, r, AcquireOptions{TTL: 10 * time.Second, Fence: i%2 == 0})
				if err != nil {
					errs <- fmt.Errorf("acquire %s: %w", r, err)
					return
				}
				if l.Resource != r {
					errs <- fmt.Errorf("asked %s, got a lock on %s", r, l.Resource)
					return
				}
				if i%3 == 0 {
					if _, err := c.Extend(ctx, l, 10*time.Second); err != nil {
						errs <- fmt.Errorf("extend %s: %w", r, err)
						return
					}
				}
				errs <- c.Release(ctx, l)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	c.mu.Lock()
	left, pend := len(c.locks), len(c.pending)
	c.mu.Unlock()
	if left != 0 || pend != 0 {
		t.Fatalf("%d locks and %d calls left on the client", left, pend)
	}
}

func TestSessionReleaseOnClose(t *testing.T) {
	d := sharedDaemon(t)
	c, err := Dial(tctx(t), d.sock)
	if err != nil {
		t.Fatal(err)
	}
	holder := dial(t, d)
	other := dial(t, d)
	r, busy := rname(t), rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := holder.Acquire(tctx(t), busy, AcquireOptions{TTL: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer hl.Release(tctx(t))
	// A call in flight when Close runs fails with ErrClosed.
	inflight := make(chan error, 1)
	go func() {
		_, err := c.Acquire(tctx(t), busy, AcquireOptions{Wait: 30 * time.Second})
		inflight <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-inflight:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("in-flight acquire: %v, want ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("in-flight call not failed by Close")
	}
	if !errors.Is(l.Err(), ErrClosed) {
		t.Fatalf("lock after Close: %v", l.Err())
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed by Close")
	}
	if err := c.Ping(tctx(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("ping after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The daemon released the 60 s lock when the connection closed.
	start := time.Now()
	l2, err := other.Acquire(tctx(t), r, AcquireOptions{Wait: 3 * time.Second})
	if err != nil {
		t.Fatalf("acquire after the owner closed: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("session release took %v", el)
	}
	l2.Release(tctx(t))
}

// keep is a time.Duration: Complete(ctx, l, 86400) is 86.4µs, which was
// sent as a 1ms done mark, the lock dropped and the resource free again at
// once. It is refused, the lock kept.
func TestCompleteKeepUnderMinimum(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []time.Duration{1, 86400, 999999} {
		err := c.Complete(tctx(t), l, keep)
		var e *Error
		if !errors.Is(err, ErrBadRequest) || !errors.As(err, &e) ||
			!strings.Contains(e.Message, "1ms minimum") || !strings.Contains(e.Message, "24*time.Hour") {
			t.Fatalf("Complete(keep %v): %v, want ErrBadRequest naming the minimum and 24*time.Hour", keep, err)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lock ended: %v", err)
	}
	if _, err := c.Acquire(tctx(t), r, AcquireOptions{}); !errors.Is(err, ErrBusy) {
		t.Fatalf("acquire after refused completes: %v, want busy (still held)", err)
	}
	// 1ms is the daemon's minimum and goes through.
	if err := c.Complete(tctx(t), l, time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

func TestErrorsIs(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	all := []error{ErrBadRequest, ErrNotHeld, ErrBusy, ErrDone, ErrTooLarge, ErrLimit,
		ErrNoQuorum, ErrShuttingDown, ErrInternal}
	only := func(t *testing.T, err error, want error) {
		t.Helper()
		var e *Error
		if !errors.As(err, &e) || e.Message == "" {
			t.Fatalf("%v: want an *Error with a message", err)
		}
		for _, s := range all {
			if errors.Is(err, s) != (s == want) {
				t.Errorf("errors.Is(%v, %v) = %v", err, s, !(s == want))
			}
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) {
			t.Errorf("%v matches a client-side error", err)
		}
	}
	// bad_request from the daemon: ttl out of range, bad token.
	_, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 5 * time.Millisecond})
	only(t, err, ErrBadRequest)
	if !strings.Contains(err.Error(), "ttl_ms") {
		t.Errorf("message does not name the field: %v", err)
	}
	_, err = c.Acquire(tctx(t), "", AcquireOptions{})
	only(t, err, ErrBadRequest)
	_, err = c.Acquire(tctx(t), strings.Repeat("x", 513), AcquireOptions{})
	only(t, err, ErrBadRequest)
	_, err = c.Acquire(tctx(t), "a\nb", AcquireOptions{})
	only(t, err, ErrBadRequest)
	bad := &Lock{Token: "NOT-A-TOKEN", Resource: r}
	only(t, c.Release(tctx(t), bad), ErrBadRequest)
	// bad_request found on this side (invalid UTF-8 would be mangled by JSON).
	_, err = c.Acquire(tctx(t), "a\xffb", AcquireOptions{})
	only(t, err, ErrBadRequest)
	only(t, c.Release(tctx(t), nil), ErrBadRequest)
	// too_large: not sent (the daemon would close the connection).
	_, err = c.Acquire(tctx(t), strings.Repeat("y", 70000), AcquireOptions{})
	only(t, err, ErrTooLarge)
	// not_held.
	ghost := &Lock{Token: strings.Repeat("0", 32), Resource: r}
	only(t, c.Release(tctx(t), ghost), ErrNotHeld)
	_, err = c.Extend(tctx(t), ghost, time.Second)
	only(t, err, ErrNotHeld)
	only(t, c.Complete(tctx(t), ghost, 0), ErrNotHeld)
	// busy and done.
	l, err := c.Acquire(tctx(t), r, AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(tctx(t), r, AcquireOptions{})
	only(t, err, ErrBusy)
	if err := l.Complete(tctx(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(tctx(t), r, AcquireOptions{})
	only(t, err, ErrDone)
	// Messages are not part of the match, codes are.
	if !errors.Is(&Error{Code: "busy", Message: "x"}, &Error{Code: "busy", Message: "x"}) ||
		errors.Is(&Error{Code: "busy", Message: "x"}, &Error{Code: "busy", Message: "y"}) ||
		errors.Is(&Error{Code: "nope"}, ErrInternal) {
		t.Error("Error.Is")
	}
	// The connection survived all of it.
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestLimit(t *testing.T) {
	d := mustDaemon(t, "--dev", "--max-conn-locks", "1")
	c := dial(t, d)
	l, err := c.Acquire(tctx(t), "a", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(tctx(t), "b", AcquireOptions{}); !errors.Is(err, ErrLimit) {
		t.Fatalf("second lock on a connection limited to 1: %v", err)
	}
	l.Release(tctx(t))
}

func TestContextCancel(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	holder := dial(t, d)
	other := dial(t, d)

	// Already cancelled: nothing is sent.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Acquire(ctx, rname(t), AcquireOptions{}); err != context.Canceled {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if err := c.Ping(ctx); err != context.Canceled {
		t.Fatalf("cancelled ctx: %v", err)
	}

	// A waiting acquire whose caller gives up returns ctx.Err() at once;
	// when the daemon grants it later, the client releases it.
	r := rname(t)
	hl, err := holder.Acquire(tctx(t), r, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, r, AcquireOptions{Wait: 10 * time.Second, TTL: 30 * time.Second})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("abandoned acquire: %v", err)
		}
		if el := time.Since(cancelled); el > 200*time.Millisecond {
			t.Errorf("cancel took %v", el)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("cancelled acquire did not return")
	}
	if err := hl.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
	// Without the client's cleanup the daemon would give r to the abandoned
	// waiter for 30 s; with it, another owner gets r quickly.
	start := time.Now()
	ol, err := other.Acquire(tctx(t), r, AcquireOptions{Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("after the abandoned acquire: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("abandoned lock released only after %v", el)
	}
	ol.Release(tctx(t))
	c.mu.Lock()
	if len(c.locks) != 0 {
		t.Errorf("abandoned lock kept on the client: %v", c.locks)
	}
	c.mu.Unlock()

	// A deadline caps wait_ms: busy or DeadlineExceeded, near the deadline.
	hl, err = holder.Acquire(tctx(t), r, AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	start = time.Now()
	_, err = c.Acquire(ctx, r, AcquireOptions{Wait: time.Minute})
	cancel()
	if !errors.Is(err, ErrBusy) && err != context.DeadlineExceeded {
		t.Fatalf("acquire with deadline: %v", err)
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Fatalf("acquire with a 300ms deadline took %v", el)
	}
	hl.Release(tctx(t))
	// The client is still fine.
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
}

func TestWithLock(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	other := dial(t, d)
	r := rname(t)
	err := c.WithLock(tctx(t), r, AcquireOptions{TTL: 2 * time.Second, Renew: true}, func(ctx context.Context) error {
		if _, err := other.Acquire(ctx, r, AcquireOptions{}); !errors.Is(err, ErrBusy) {
			return fmt.Errorf("inside WithLock another acquire got %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := other.Acquire(tctx(t), r, AcquireOptions{})
	if err != nil {
		t.Fatalf("not released after WithLock: %v", err)
	}
	// fn's error comes back, and the lock is released anyway.
	boom := errors.New("boom")
	if err := c.WithLock(tctx(t), r, AcquireOptions{}, func(context.Context) error { return boom }); !errors.Is(err, ErrBusy) {
		t.Fatalf("WithLock on a busy resource: %v", err)
	}
	l.Release(tctx(t))
	if err := c.WithLock(tctx(t), r, AcquireOptions{}, func(context.Context) error { return boom }); err != boom {
		t.Fatalf("WithLock: %v, want fn's error", err)
	}
	// A lock that expires under fn cancels fn's context.
	err = c.WithLock(tctx(t), r, AcquireOptions{TTL: 100 * time.Millisecond}, func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(3 * time.Second):
			return errors.New("fn's context not cancelled when the lock expired")
		}
	})
	if !errors.Is(err, ErrExpired) {
		t.Fatalf("WithLock past validity: %v", err)
	}
	l, err = other.Acquire(tctx(t), r, AcquireOptions{Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(tctx(t))
}
