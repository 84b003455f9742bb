package redlockd

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestLostContext runs its own five redis-servers, pauses three of them so
// renewals cannot keep a quorum, and checks that the daemon's lost event
// ends the lock: Lost() closes, Context() and WithLock's fn context are
// cancelled.
func TestLostContext(t *testing.T) {
	cl := startCluster(t, 5)
	d := mustDaemon(t, cl.nodeArgs()...)
	c := dial(t, d)

	l, err := c.Acquire(tctx(t), "go:lost:a", AcquireOptions{TTL: time.Second, Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	// A lock without renew on the same client is not affected by the event
	// for another token.
	plain, err := c.Acquire(tctx(t), "go:lost:plain", AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	fnStarted := make(chan struct{})
	withLock := make(chan error, 1)
	fnSaw := make(chan error, 1)
	go func() {
		withLock <- c.WithLock(tctx(t), "go:lost:b", AcquireOptions{TTL: time.Second, Renew: true},
			func(ctx context.Context) error {
				close(fnStarted)
				select {
				case <-ctx.Done():
					fnSaw <- ctx.Err()
					return ctx.Err()
				case <-time.After(8 * time.Second):
					fnSaw <- errors.New("fn's context was not cancelled")
					return nil
				}
			})
	}()
	select {
	case <-fnStarted:
	case err := <-withLock:
		t.Fatalf("WithLock: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("WithLock did not start fn")
	}
	// Renewal works while the nodes are fine.
	time.Sleep(500 * time.Millisecond)
	if l.Err() != nil {
		t.Fatalf("lost before the nodes stopped: %v", l.Err())
	}

	cl.signal(syscall.SIGSTOP, 0, 1, 2)
	t.Cleanup(func() { cl.signal(syscall.SIGCONT, 0, 1, 2) })
	stopped := time.Now()

	select {
	case <-l.Lost():
		t.Logf("lost %v after SIGSTOP of 3 nodes", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("no lost event within 5 s of losing the quorum")
	}
	if !errors.Is(l.Err(), ErrLost) {
		t.Fatalf("Err %v, want ErrLost", l.Err())
	}
	if l.Context().Err() != context.Canceled {
		t.Fatalf("lock context: %v", l.Context().Err())
	}
	select {
	case err := <-fnSaw:
		if err != context.Canceled {
			t.Fatalf("fn: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WithLock's fn context not cancelled")
	}
	select {
	case err := <-withLock:
		if !errors.Is(err, ErrLost) {
			t.Fatalf("WithLock: %v, want ErrLost", err)
		}
	case <-time.After(callTimeout):
		t.Fatal("WithLock did not return")
	}
	if plain.Err() != nil {
		t.Fatalf("unrelated lock ended: %v", plain.Err())
	}
	// Without a quorum: acquire and health say no_quorum.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = c.Acquire(ctx, "go:lost:c", AcquireOptions{})
	cancel()
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("acquire without quorum: %v", err)
	}

	cl.signal(syscall.SIGCONT, 0, 1, 2)
	// The client is still usable, and the lost resource can be taken again.
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l2, err := c.Acquire(tctx(t), "go:lost:a", AcquireOptions{TTL: 5 * time.Second})
		if err == nil {
			l2.Release(tctx(t))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGCONT: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := plain.Release(tctx(t)); err != nil {
		t.Logf("release of the plain lock after the outage: %v", err)
	}
}

func TestHealthNoQuorum(t *testing.T) {
	cl := startCluster(t, 3)
	d := mustDaemon(t, cl.nodeArgs()...)
	c := dial(t, d)
	cl.signal(syscall.SIGTERM, 0, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := c.Health(tctx(t))
		if err != nil {
			if !errors.Is(err, ErrNoQuorum) || h == nil || h.OK || h.Quorum != 2 || len(h.Nodes) != 3 {
				t.Fatalf("health: %+v, %v", h, err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health still ok with 2 of 3 nodes gone: %+v", h)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
