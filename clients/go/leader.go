package redlockd

import (
	"context"
	"errors"
	"math/rand"
	"time"
)

// Leader election over redlockd: one leader at a time, standbys in line.
//
// Campaign acquires the resource with Renew and Fence and waits in the
// daemon's FIFO (standbys on one daemon are served in arrival order; one on
// another daemon wakes on the release's pub/sub announcement, or after the
// TTL when the leader's daemon died). The daemon's wait is bounded (5 min),
// so Campaign waits in rounds and goes on after each ErrBusy; after
// ErrNoQuorum or ErrLimit it backs off and tries again.

// MaxRound is the longest single wait the daemon accepts.
const MaxRound = 5 * time.Minute

// Leadership is one term of leadership, from Campaign.
type Leadership struct {
	lock *Lock
}

// Campaign blocks until this client leads resource, or ctx ends (ctx.Err()),
// or an error that does not pass (ErrClosed, ErrDone, ErrBadRequest,
// ErrShuttingDown). ttl is the leadership lock's TTL, renewed by the daemon
// every ttl/3: a leader whose daemon died is replaced within it (0: 5 s).
func (c *Client) Campaign(ctx context.Context, resource string, ttl time.Duration) (*Leadership, error) {
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	failures := 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l, err := c.Acquire(ctx, resource, AcquireOptions{TTL: ttl, Wait: MaxRound, Renew: true, Fence: true})
		switch {
		case err == nil:
			return &Leadership{lock: l}, nil
		case errors.Is(err, ErrBusy):
			failures = 0 // a round ran out: wait another
			continue
		case errors.Is(err, ErrNoQuorum), errors.Is(err, ErrLimit):
			failures++
		default:
			return nil, err
		}
		shift := failures
		if shift > 6 {
			shift = 6
		}
		pause := time.Duration(float64(50*time.Millisecond<<shift) * (0.5 + rand.Float64()/2))
		if pause > 2*time.Second {
			pause = 2 * time.Second
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// Context ends when leadership does: lost (the daemon's lost event, sent
// before the lock's validity ends), the client's connection closing, or
// Resign. Run the leader's work under it.
func (ld *Leadership) Context() context.Context { return ld.lock.Context() }

// Done is Context().Done().
func (ld *Leadership) Done() <-chan struct{} { return ld.lock.Done() }

// Err is nil while leading, then why it ended: ErrReleased after Resign,
// ErrLost, ErrClosed, ...
func (ld *Leadership) Err() error { return ld.lock.Err() }

// Fence is the term's fencing token: larger for every later term, whichever
// daemon granted it. Pass it to what the leader writes.
func (ld *Leadership) Fence() int64 { return ld.lock.Fence }

// Lock is the renewing lock that is the leadership.
func (ld *Leadership) Lock() *Lock { return ld.lock }

// Resign gives leadership up at once: the next standby leads. A leadership
// that already ended has nothing to give (nil).
func (ld *Leadership) Resign(ctx context.Context) error {
	if ld.lock.Err() != nil {
		return nil
	}
	err := ld.lock.c.Release(ctx, ld.lock)
	if errors.Is(err, ErrNotHeld) {
		return nil
	}
	return err
}
