package redlockd

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The daemon answers without an id a line it could not take (too_large, an
// unparseable line, or a connection over --max-connections: limit), then
// closes the connection. Calls in flight must fail with the daemon's reason
// (errors.Is(err, ErrLimit), errors.As to an *Error), still matching
// ErrClosed, not with a bare "connection lost: EOF".

// checkDaemonErr checks that err is the loss of the connection after the
// daemon's id-less error with code want.
func checkDaemonErr(t *testing.T, what string, err error, want *Error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v; want errors.Is(err, %v)", what, err, want)
	}
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("%s: %v; want errors.Is(err, ErrClosed) too", what, err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != want.Code || e.Message == "" {
		t.Fatalf("%s: errors.As gives %+v; want code %s with the daemon's message", what, e, want.Code)
	}
	if !strings.Contains(err.Error(), want.Code) || !strings.Contains(err.Error(), e.Message) {
		t.Fatalf("%s: message %q does not say why", what, err.Error())
	}
}

func waitDone(t *testing.T, c *Client) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("client not stopped within 5 s of the daemon closing")
	}
}

// Real daemon, --max-connections 1: a second client's calls fail with limit.
func TestConnectionLimitFromDaemon(t *testing.T) {
	d := mustDaemon(t, "--dev", "--max-connections", "1")
	first := dial(t, d)
	if err := first.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}

	second := dial(t, d)
	err := second.Ping(tctx(t))
	checkDaemonErr(t, "ping over the connection limit", err, ErrLimit)
	waitDone(t, second)
	checkDaemonErr(t, "Err", second.Err(), ErrLimit)
	// Later calls on the stopped client say the same.
	_, err = second.Acquire(tctx(t), rname(t), AcquireOptions{})
	checkDaemonErr(t, "acquire after the close", err, ErrLimit)

	// Several calls in flight at once all get the daemon's reason.
	third := dial(t, d)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i%2 == 0 {
				errs[i] = third.Ping(tctx(t))
			} else {
				_, errs[i] = third.Acquire(tctx(t), rname(t), AcquireOptions{})
			}
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		checkDaemonErr(t, "concurrent call "+strconv.Itoa(i), err, ErrLimit)
	}

	// The first connection is unaffected; once it is closed the slot frees.
	if err := first.Ping(tctx(t)); err != nil {
		t.Fatal(err)
	}
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dial(t, d)
		err := c.Ping(tctx(t))
		c.Close()
		if err == nil {
			break
		}
		if !errors.Is(err, ErrLimit) || time.Now().After(deadline) {
			t.Fatalf("after the first client closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Real daemon with --max-line-bytes below the client's own limit: the daemon
// answers too_large without an id and closes; the call, and a lock held on
// the connection, end with ErrTooLarge.
func TestTooLargeFromDaemon(t *testing.T) {
	d := mustDaemon(t, "--dev", "--max-line-bytes", "1024")
	c := dial(t, d)
	l, err := c.Acquire(tctx(t), rname(t), AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Acquire(tctx(t), rname(t)+strings.Repeat("x", 2000), AcquireOptions{})
	checkDaemonErr(t, "acquire over --max-line-bytes", err, ErrTooLarge)
	waitDone(t, c)
	select {
	case <-l.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lock on the closed connection not ended")
	}
	checkDaemonErr(t, "lock", l.Err(), ErrTooLarge)
}

// MaxRequestBytes counts a line as the daemon's --max-line-bytes does,
// without its newline: a line of exactly the limit is the daemon's to
// read (the client refused it), one byte more is refused locally.
func TestRequestLineLimitAsTheDaemonCounts(t *testing.T) {
	d := sharedDaemon(t) // the default --max-line-bytes, 65536
	base := len(`{"op":"acquire","id":1,"resource":""}`)
	line := func(n int) []byte {
		return []byte(`{"op":"acquire","id":1,"resource":"` + strings.Repeat("y", n-base) + "\"}\n")
	}
	// The daemon reads the first (and refuses the resource, over 512
	// bytes) and answers the second too_large.
	for _, tc := range []struct {
		n    int
		want string
	}{{MaxRequestBytes, `"bad_request"`}, {MaxRequestBytes + 1, `"too_large"`}} {
		conn, err := net.Dial("unix", d.sock)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(callTimeout))
		if _, err := conn.Write(line(tc.n)); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil || !strings.Contains(got, tc.want) {
			t.Fatalf("daemon, line of %d bytes: %q, %v; want %s", tc.n, got, err, tc.want)
		}
	}
	// The client, the same lines: a fresh one's first request has id 1.
	c := dial(t, d)
	_, err := c.Acquire(tctx(t), strings.Repeat("y", MaxRequestBytes-base), AcquireOptions{})
	var e *Error
	if !errors.Is(err, ErrBadRequest) || !errors.As(err, &e) || !strings.Contains(e.Message, "resource") {
		t.Fatalf("line of exactly MaxRequestBytes: %v, want the daemon's bad_request on the resource", err)
	}
	_, err = c.Acquire(tctx(t), strings.Repeat("y", MaxRequestBytes-base+1), AcquireOptions{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "not sent") {
		t.Fatalf("line of MaxRequestBytes+1: %v, want ErrTooLarge, not sent", err)
	}
	if err := c.Ping(tctx(t)); err != nil {
		t.Fatalf("the connection did not survive: %v", err)
	}
}

// Fake daemon: an id-less error (absent or null id) followed by the close
// fails every call in flight with it; an answer with an id that arrives
// between the two still reaches its caller.
func TestIDLessErrorFailsPending(t *testing.T) {
	for _, idField := range []string{``, `"id":null,`} {
		t.Run("id="+idField, func(t *testing.T) {
			c := fakeDaemon(t, func(br *bufio.Reader, w net.Conn) {
				a := readReq(t, br)
				b := readReq(t, br)
				if a == nil || b == nil {
					return
				}
				w.Write([]byte(`{` + idField + `"ok":false,"error":{"code":"too_large","message":"request line over the limit"}}` + "\n"))
				id := strconv.FormatFloat(a["id"].(float64), 'f', -1, 64)
				w.Write([]byte(`{"id":` + id + `,"ok":true}` + "\n"))
				// close: b is never answered
			})
			errA := make(chan error, 1)
			go func() { errA <- c.Ping(tctx(t)) }()
			time.Sleep(20 * time.Millisecond) // keep the send order
			errB := c.Ping(tctx(t))
			if err := <-errA; err != nil {
				t.Fatalf("answered call: %v", err)
			}
			checkDaemonErr(t, "unanswered call", errB, ErrTooLarge)
			if !errors.Is(errB, io.EOF) {
				t.Fatalf("unanswered call: %v; want the I/O error still wrapped", errB)
			}
		})
	}
}

// Without an id-less error a lost connection is still the plain loss.
func TestLossWithoutDaemonError(t *testing.T) {
	c := fakeDaemon(t, func(br *bufio.Reader, w net.Conn) { readReq(t, br) })
	err := c.Ping(tctx(t))
	if !errors.Is(err, ErrClosed) || !errors.Is(err, io.EOF) {
		t.Fatalf("ping: %v", err)
	}
	var e *Error
	if errors.As(err, &e) {
		t.Fatalf("a plain loss matches *Error %v", e)
	}
	for _, s := range []error{ErrLimit, ErrTooLarge, ErrInternal} {
		if errors.Is(err, s) {
			t.Fatalf("a plain loss matches %v", s)
		}
	}
}
