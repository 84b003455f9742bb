package redlockd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestLocksPagesAndOwner(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	tag := rname(t)
	var held []*Lock
	for i := 0; i < 5; i++ {
		l, err := c.Acquire(tctx(t), fmt.Sprintf("%s:%d", tag, i), AcquireOptions{TTL: 20 * time.Second, Fence: i == 0})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var names []string
	cursor := ""
	for pages := 0; pages < 10; pages++ {
		p, err := c.Locks(tctx(t), LocksOptions{Prefix: tag + ":", Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Locks) > 2 || p.Total < 5 {
			t.Fatalf("page %+v", p)
		}
		for _, e := range p.Locks {
			names = append(names, e.Resource)
			if e.Owner.HTTP || e.Owner.PID != os.Getpid() || e.TTL != 20*time.Second {
				t.Fatalf("entry %+v", e)
			}
			if e.Resource == tag+":0" && (e.Fence == nil || *e.Fence != held[0].Fence) {
				t.Fatalf("fence %+v, lock %d", e.Fence, held[0].Fence)
			}
			if e.Resource != tag+":0" && e.Fence != nil {
				t.Fatalf("fence without asking: %+v", e)
			}
			if strings.Contains(fmt.Sprintf("%+v", e), held[0].Token) {
				t.Fatal("a token in the listing")
			}
		}
		if cursor = p.Next; cursor == "" {
			break
		}
	}
	if strings.Join(names, ",") != strings.Join([]string{tag + ":0", tag + ":1", tag + ":2", tag + ":3", tag + ":4"}, ",") {
		t.Fatalf("listed %v", names)
	}
	if _, err := c.Locks(tctx(t), LocksOptions{Limit: 1001}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("limit 1001: %v", err)
	}
	for _, l := range held {
		if err := l.Release(tctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInspectStates(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	r := rname(t)
	in, err := c.Inspect(tctx(t), r, false)
	if err != nil || in.State != "free" || in.Mine || in.PTTL != -1 {
		t.Fatalf("free: %+v %v", in, err)
	}
	l, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 20 * time.Second, Fence: true})
	if err != nil {
		t.Fatal(err)
	}
	in, err = c.Inspect(tctx(t), r, true)
	if err != nil || in.State != "held" || !in.Mine || in.Agree < 3 || in.PTTL <= 0 ||
		in.PTTL > 20*time.Second || in.Fence == nil || *in.Fence < l.Fence {
		t.Fatalf("held: %+v %v", in, err)
	}
	if err := l.Complete(tctx(t), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	in, err = c.Inspect(tctx(t), r, false)
	if err != nil || in.State != "done" || in.Mine {
		t.Fatalf("done: %+v %v", in, err)
	}
}

func TestPermits(t *testing.T) {
	d := sharedDaemon(t)
	c := dial(t, d)
	other := dial(t, d)
	r := rname(t)
	a, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 20 * time.Second, Permits: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(tctx(t), r, AcquireOptions{TTL: 20 * time.Second, Permits: 2})
	if err != nil {
		t.Fatal(err)
	}
	if a.Permits != 2 || b.Permits != 2 || a.Permit == b.Permit || a.Permit+b.Permit != 1 {
		t.Fatalf("permits %d/%d and %d/%d", a.Permit, a.Permits, b.Permit, b.Permits)
	}
	if _, err := c.Acquire(tctx(t), r, AcquireOptions{Permits: 2}); !errors.Is(err, ErrBusy) {
		t.Fatalf("third permit of 2: %v", err)
	}
	// A Lock built by hand with its permit, released through another client.
	hand := &Lock{Token: a.Token, Resource: r, Permits: 2, Permit: a.Permit}
	if err := other.Release(tctx(t), hand); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Extend(tctx(t), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Locks(tctx(t), LocksOptions{Prefix: r}); err != nil || len(p.Locks) != 0 {
		t.Fatalf("left: %+v %v", p, err)
	}
	if _, err := c.Acquire(tctx(t), r, AcquireOptions{Permits: 1}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("permits 1: %v", err)
	}
}
