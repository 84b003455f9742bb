package redlockd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"
)

// AcquireOptions tune Acquire. The zero value takes the daemon's defaults:
// a 30 s lock, no waiting, no renewal, no fencing token.
type AcquireOptions struct {
	// TTL is the lock's time to live (10 ms .. 24 h; 0: the daemon's 30 s).
	// Sent in whole milliseconds, rounded up.
	TTL time.Duration
	// Wait keeps trying while the resource is busy, up to this long
	// (0 .. 5 min). It is capped at ctx's deadline, if sooner.
	Wait time.Duration
	// Renew has the daemon extend the lock every TTL/3 until it is released,
	// this client's connection closes, or RenewMax passes. If renewal cannot
	// keep a quorum the daemon reports the lock lost: Lock.Lost() closes.
	Renew bool
	// RenewMax stops renewing after this long (0: no limit); the lock then
	// expires normally.
	RenewMax time.Duration
	// Fence also asks for a fencing token (Lock.Fence), strictly increasing
	// per resource across all fenced acquisitions.
	Fence bool
	// Permits (2..1024) takes one of this many permits of a semaphore
	// instead of the lock: at most Permits holders at once. Lock.Permit
	// says which; 0: a lock.
	Permits int
}

// Lock is a lock held through a Client. Its exported fields do not change.
//
// A Lock built by hand with Token and Resource (a token handed over by
// another process, say) may be passed to a Client's Release, Extend and
// Complete; the client does not track it otherwise.
//
// A lock ends when it is released or completed, when the daemon reports it
// lost, when its validity runs out on the client's clock (a lock without
// Renew that was not extended in time; a renewed lock past RenewMax), or when
// its client closes or loses the connection (the daemon then releases the
// session's locks). Context() is cancelled on any end; Lost() closes on every
// end except Release and Complete; Err() says which.
type Lock struct {
	Token    string        // 32 hex characters: the proof of ownership
	Resource string        // the resource locked
	Validity time.Duration // how long the lock was safely held, from Acquired
	Fence    int64         // fencing token; 0 unless AcquireOptions.Fence
	Acquired time.Time     // when the acquire was sent (validity counts from later)
	Permits  int           // a semaphore's permit: of how many; 0 for a lock
	Permit   int           // which permit (0..Permits-1), sent with its token

	c        *Client // nil for a Lock built by hand
	renew    bool
	once     sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	lost     chan struct{}
	mu       sync.Mutex
	err      error
	deadline time.Time // zero: none known on this side (renewed lock)
	timer    *time.Timer
}

func (l *Lock) init() {
	l.once.Do(func() {
		l.lost = make(chan struct{})
		l.ctx, l.cancel = context.WithCancel(context.Background())
	})
}

// Lost is closed when the lock ends other than by Release or Complete: a lost
// event from the daemon, expiry, or the client's connection ending.
func (l *Lock) Lost() <-chan struct{} { l.init(); return l.lost }

// Context is cancelled when the lock ends for any reason, including Release
// and Complete. It is not derived from the context given to Acquire.
func (l *Lock) Context() context.Context { l.init(); return l.ctx }

// Done is Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.Context().Done() }

// Err is nil while the lock is held, then why it ended: ErrReleased (Release
// or Complete), ErrLost (lost event, or not_held from the daemon), ErrExpired,
// ErrClosed, or the connection error (which matches ErrClosed).
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Deadline is when the lock's validity ends on this side's clock, after
// extensions; ok is false for a renewed lock without RenewMax, whose end
// only the daemon knows.
func (l *Lock) Deadline() (deadline time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline, !l.deadline.IsZero()
}

var errNoClient = &Error{Code: "bad_request", Message: "lock: not from Acquire; pass it to a Client's method (not sent)"}

// Release is l's client's Release.
func (l *Lock) Release(ctx context.Context) error {
	if l.c == nil {
		return errNoClient
	}
	return l.c.Release(ctx, l)
}

// Extend is l's client's Extend.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (time.Duration, error) {
	if l.c == nil {
		return 0, errNoClient
	}
	return l.c.Extend(ctx, l, ttl)
}

// Complete is l's client's Complete.
func (l *Lock) Complete(ctx context.Context, keep time.Duration) error {
	if l.c == nil {
		return errNoClient
	}
	return l.c.Complete(ctx, l, keep)
}

func (c *Client) newLock(cl *call, r *wireResponse) *Lock {
	validity := time.Duration(*r.ValidityMS) * time.Millisecond
	l := &Lock{
		Token:    r.Lock,
		Resource: cl.resource,
		Validity: validity,
		Acquired: cl.start,
		c:        c,
		renew:    cl.renew,
	}
	l.init()
	if r.Resource != nil {
		l.Resource = *r.Resource
	}
	if r.Permit != nil && cl.permits > 0 {
		l.Permits, l.Permit = cl.permits, *r.Permit
	}
	if r.Fence != nil {
		l.Fence = *r.Fence
	}
	switch {
	case !cl.renew:
		l.setDeadline(cl.start.Add(validity))
	case cl.renewMax > 0:
		d := cl.renewMax
		if validity > d {
			d = validity
		}
		l.setDeadline(cl.start.Add(d))
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		l.end(err, true)
		return l
	}
	c.locks[l.Token] = l
	c.mu.Unlock()
	return l
}

func (l *Lock) setDeadline(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.deadline = t
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = time.AfterFunc(time.Until(t), l.checkExpiry)
}

func (l *Lock) checkExpiry() {
	l.mu.Lock()
	expired := l.err == nil && !l.deadline.IsZero() && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if expired {
		l.drop(ErrExpired, true)
	}
}

// extended records a successful extend sent at start.
func (l *Lock) extended(start time.Time, validity time.Duration) {
	t := start.Add(validity)
	l.mu.Lock()
	has := !l.deadline.IsZero()
	later := t.After(l.deadline)
	l.mu.Unlock()
	switch {
	case !l.renew:
		l.setDeadline(t)
	case has && later: // renewed until RenewMax: the extension may outlast it
		l.setDeadline(t)
	}
}

// drop forgets the lock on its client and ends it.
func (l *Lock) drop(reason error, lost bool) {
	if l == nil {
		return
	}
	if c := l.c; c != nil {
		c.mu.Lock()
		if c.locks[l.Token] == l {
			delete(c.locks, l.Token)
		}
		c.mu.Unlock()
	}
	l.end(reason, lost)
}

func (l *Lock) end(reason error, lost bool) {
	l.init()
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = reason
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.cancel() // first: once Lost() is closed, Context() is already cancelled
	if lost {
		close(l.lost)
	}
}

// Acquire takes a lock on resource. Errors: ErrBusy (held by another owner,
// after opts.Wait), ErrDone (the resource was completed), ErrNoQuorum,
// ErrLimit, ErrShuttingDown, ErrBadRequest, or ctx.Err(): if ctx ends first,
// and the daemon grants the lock afterwards, the client releases it.
func (c *Client) Acquire(ctx context.Context, resource string, opts AcquireOptions) (*Lock, error) {
	if !utf8.ValidString(resource) {
		return nil, &Error{Code: "bad_request", Message: "resource: not valid UTF-8 (not sent)"}
	}
	req := &wireRequest{
		Op:       "acquire",
		Resource: resource,
		TTL:      durMS(opts.TTL),
		Wait:     durMS(opts.Wait),
		Renew:    opts.Renew,
		RenewMax: durMS(opts.RenewMax),
		Fence:    opts.Fence,
		Permits:  opts.Permits,
	}
	if dl, ok := ctx.Deadline(); ok && opts.Wait > 0 {
		// No point waiting past the caller's deadline: the answer would
		// only be released again.
		if left := time.Until(dl); left < opts.Wait {
			req.Wait = int64(left / time.Millisecond)
			if req.Wait < 0 {
				req.Wait = 0
			}
		}
	}
	res, err := c.do(ctx, &call{op: "acquire", resource: resource, renew: opts.Renew,
		renewMax: opts.RenewMax, permits: opts.Permits}, req)
	if err != nil {
		return nil, err
	}
	return res.lock, nil
}

// permitRef is the permit to send with the lock's token, so that any daemon
// finds a semaphore's slot; nil for a lock.
func (l *Lock) permitRef() *int {
	if l.Permits == 0 {
		return nil
	}
	p := l.Permit
	return &p
}

func checkLock(l *Lock) error {
	if l == nil || l.Token == "" {
		return &Error{Code: "bad_request", Message: "lock: nil or without a token (not sent)"}
	}
	return nil
}

// Release gives the lock back (the request carries the token and the
// resource). ErrNotHeld: it had already expired or been lost.
func (c *Client) Release(ctx context.Context, l *Lock) error {
	if err := checkLock(l); err != nil {
		return err
	}
	_, err := c.do(ctx, &call{op: "release", lock: l},
		&wireRequest{Op: "release", Lock: l.Token, Resource: l.Resource, Permit: l.permitRef()})
	return err
}

// Extend pushes the lock's expiry to ttl from now and returns the new
// validity. With ttl 0 the daemon picks: today the ttl last given to this
// lock on that daemon (acquire or a previous extend), or 30 s for a lock it
// does not know; pass the ttl to be sure. ErrNotHeld: the lock is gone and
// cannot be brought back.
func (c *Client) Extend(ctx context.Context, l *Lock, ttl time.Duration) (time.Duration, error) {
	if err := checkLock(l); err != nil {
		return 0, err
	}
	res, err := c.do(ctx, &call{op: "extend", lock: l},
		&wireRequest{Op: "extend", Lock: l.Token, Resource: l.Resource, TTL: durMS(ttl), Permit: l.permitRef()})
	if err != nil {
		return 0, err
	}
	if res.resp.ValidityMS == nil {
		return 0, fmt.Errorf("%w: extend answer without validity_ms", ErrProtocol)
	}
	return time.Duration(*res.resp.ValidityMS) * time.Millisecond, nil
}

// Complete marks the resource done for keep (0: the daemon's default, one
// day) and drops the lock: until the mark expires every Acquire of the
// resource fails with ErrDone. ErrNotHeld: the lock was already gone.
//
// keep is a time.Duration: write 24*time.Hour, not 86400000 (that is
// 86.4ms). A keep under the daemon's 1ms minimum, which only a bare number
// gives, fails with ErrBadRequest and is not sent (it would be rounded up
// to a 1ms mark).
func (c *Client) Complete(ctx context.Context, l *Lock, keep time.Duration) error {
	if err := checkLock(l); err != nil {
		return err
	}
	if keep > 0 && keep < time.Millisecond {
		return &Error{Code: "bad_request", Message: fmt.Sprintf(
			"keep %v is under the daemon's 1ms minimum: keep is a time.Duration, "+
				"so a bare number is nanoseconds; write 24*time.Hour (not sent)", keep)}
	}
	_, err := c.do(ctx, &call{op: "complete", lock: l},
		&wireRequest{Op: "complete", Lock: l.Token, Resource: l.Resource, Keep: durMS(keep), Permit: l.permitRef()})
	return err
}

// WithLock acquires resource, runs fn with a context that is cancelled when
// ctx ends or the lock ends (lost, expired, connection closed), and releases
// the lock afterwards, even if fn panics. It returns Acquire's error, else
// fn's error; if the lock ended while fn ran and fn returned nil or a
// context.Canceled error, the lock's error (ErrLost, ErrExpired, ...); else
// Release's error.
func (c *Client) WithLock(ctx context.Context, resource string, opts AcquireOptions,
	fn func(ctx context.Context) error) (err error) {
	l, err := c.Acquire(ctx, resource, opts)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-l.Done():
			cancel()
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), cleanupTimeout)
		rerr := c.Release(rctx, l)
		rcancel()
		if lerr := l.Err(); lerr != nil && lerr != ErrReleased {
			if err == nil || errors.Is(err, context.Canceled) {
				err = lerr
			}
		} else if err == nil {
			err = rerr
		}
	}()
	return fn(fctx)
}
