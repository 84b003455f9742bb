// Package redlockd is a client for redlockd, a distributed-lock daemon
// (Redlock over N Redis nodes) that serves newline-delimited JSON on a unix
// socket.
//
// A Client owns one connection. Any number of goroutines may call it at once:
// every request carries a fresh integer "id" and one reader goroutine matches
// the answers, which may arrive out of order, and handles the daemon's
// {"event":"lost"} messages. Every call takes a context.Context; a call whose
// context ends before the answer returns ctx.Err(), and an acquire that the
// daemon grants after its caller gave up is released by the client.
//
// Locks taken on a connection are session locks: the daemon releases them on
// every node when the connection closes (Close, or the process dying).
//
// The package uses the standard library only.
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
	"strconv"
	"sync"
	"time"
)

// DefaultSocket is the socket Dial uses when given no path and
// REDLOCKD_SOCKET is unset.
const DefaultSocket = "./redlockd.sock"

const (
	// MaxRequestBytes is the daemon's default request line limit (the line
	// without its newline). A request whose line would be longer fails locally with ErrTooLarge instead of
	// being sent: the daemon answers too_large and closes the connection.
	MaxRequestBytes = 64 << 10

	maxResponseBytes = 4 << 20          // longest answer line accepted
	cleanupTimeout   = 10 * time.Second // releasing abandoned acquisitions
	closeTimeout     = 2 * time.Second  // Close releasing the session's locks
	// After a failed write, how long the reader may still read what the
	// daemon sent before it closed (an id-less error saying why).
	writeFailGrace = time.Second
)

// Client is one NDJSON connection to redlockd. It is safe for concurrent use.
type Client struct {
	conn net.Conn

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call // sent or queued, answer not yet read
	queue   []*call          // waiting for the writer
	locks   map[string]*Lock // token -> lock held on this session
	err     error            // why the client stopped; nil while usable
	closing bool             // Close is releasing locks: only internal calls
	// The daemon's last error answered without an id (too_large, an
	// unparseable line, limit): it closes the connection next, and the
	// loss of the connection carries this reason.
	daemonErr *Error

	wake       chan struct{} // writer has work (capacity 1)
	done       chan struct{} // closed when the client stops
	readerDone chan struct{}
	writerDone chan struct{}
}

// call is one request in flight.
type call struct {
	id        uint64
	op        string
	line      []byte
	start     time.Time // before the request was queued: validity counts from later
	resource  string    // acquire
	renew     bool      // acquire
	renewMax  time.Duration
	permits   int   // acquire: a semaphore's
	lock      *Lock // release, extend, complete
	internal  bool  // the client's own call (cleanup), allowed while closing
	ch        chan result
	abandoned bool // the caller gave up (guarded by Client.mu)
}

type result struct {
	resp *wireResponse
	lock *Lock // a successful acquire
	err  error
}

// Dial connects to the daemon's unix socket at path. An empty path means
// $REDLOCKD_SOCKET, or DefaultSocket when that is unset. ctx bounds the
// connect only.
func Dial(ctx context.Context, path string) (*Client, error) {
	if path == "" {
		path = os.Getenv("REDLOCKD_SOCKET")
	}
	if path == "" {
		path = DefaultSocket
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("redlockd: dial %s: %w", path, err)
	}
	return NewClient(conn), nil
}

// NewClient runs the protocol over an established connection (normally Dial
// does this). The client owns conn and closes it.
func NewClient(conn net.Conn) *Client {
	c := &Client{
		conn:       conn,
		pending:    make(map[uint64]*call),
		locks:      make(map[string]*Lock),
		wake:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	go c.readLoop()
	go c.writeLoop()
	return c
}

// Close closes the client. Calls in flight fail at once with ErrClosed (an
// acquire the daemon grants afterwards is given back). Every lock held on
// this client is released (pipelined, bounded by 2 s; the daemon also
// releases a session's locks when its connection closes) and ends with
// Lock.Err() == ErrClosed. Close waits for the client's goroutines and
// always returns nil; calling it again is a no-op.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.err != nil || c.closing {
		c.mu.Unlock()
		<-c.readerDone
		<-c.writerDone
		return nil
	}
	c.closing = true
	var failed []*call
	for _, cl := range c.pending {
		if !cl.abandoned && !cl.internal {
			cl.abandoned = true // the reader now cleans up after it
			failed = append(failed, cl)
		}
	}
	locks := make([]*Lock, 0, len(c.locks))
	for _, l := range c.locks {
		locks = append(locks, l)
	}
	c.mu.Unlock()
	for _, cl := range failed {
		cl.ch <- result{err: ErrClosed}
	}

	// Release explicitly rather than rely on the close alone: the daemon
	// may keep a closed session's locks while one of its calls is still
	// waiting (see the README).
	if len(locks) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		var wg sync.WaitGroup
		for _, l := range locks {
			wg.Add(1)
			go func(l *Lock) {
				defer wg.Done()
				_, _ = c.do(ctx, &call{op: "release-on-close", internal: true},
					&wireRequest{Op: "release", Lock: l.Token, Resource: l.Resource})
			}(l)
		}
		wg.Wait()
		cancel()
	}
	c.fail(ErrClosed)
	<-c.readerDone
	<-c.writerDone
	return nil
}

// Done is closed when the client stops working (Close or a lost connection);
// Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the client is usable, then ErrClosed or the connection
// error (errors.Is(err, ErrClosed) holds for both). When the daemon said why
// it closed the connection (an error answered without an id: ErrLimit over
// --max-connections, ErrTooLarge, ErrBadRequest), the connection error also
// matches that error: errors.Is(err, ErrLimit) holds, and errors.As gives the *Error.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Ping checks that the daemon is alive and reading.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.do(ctx, &call{op: "ping"}, &wireRequest{Op: "ping"})
	return err
}

// Health is the daemon's view of its Redis nodes.
type Health struct {
	OK     bool // a quorum of nodes is usable
	Quorum int  // N/2 + 1
	Nodes  []Node
}

// Node is one Redis node as the daemon sees it.
type Node struct {
	Addr        string        // display address (never a password)
	Up          bool          // connected
	State       string        // "up", "down", "connecting", ...
	LastError   string        // "" when none
	RTT         time.Duration // last round trip; -1 when unknown
	Quarantined bool          // restarted node not yet trusted again
	TLS         string        // rediss://: "verified" or "insecure"; "" plain
	Eviction    string        // maxmemory-policy of a node that may evict lock keys; "" when it may not
	Refusing    string        // last error it refused a lock command with since its last answered acquire (OOM, READONLY, ...); "" when none
}

// Health asks for the per-node state. When the daemon reports no quorum it
// returns the Health and an error matching ErrNoQuorum.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	res, err := c.do(ctx, &call{op: "health"}, &wireRequest{Op: "health"})
	if res.resp == nil {
		return nil, err
	}
	return res.resp.health(), err
}

// do sends one request and waits for its answer, the client's end or ctx.
func (c *Client) do(ctx context.Context, cl *call, req *wireRequest) (result, error) {
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	cl.ch = make(chan result, 1)
	c.mu.Lock()
	if c.err != nil || (c.closing && !cl.internal) {
		err := c.err
		if err == nil {
			err = ErrClosed
		}
		c.mu.Unlock()
		return result{}, err
	}
	c.nextID++
	cl.id = c.nextID
	req.ID = cl.id
	line, err := encodeRequest(req)
	if err != nil {
		c.mu.Unlock()
		return result{}, err
	}
	cl.line = line
	cl.start = time.Now()
	c.pending[cl.id] = cl
	c.queue = append(c.queue, cl)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}

	select {
	case r := <-cl.ch:
		return r, r.err
	case <-ctx.Done():
		c.mu.Lock()
		if c.pending[cl.id] == cl {
			// Not answered yet: leave a note for the reader, which
			// releases an acquisition that succeeds later.
			cl.abandoned = true
			c.mu.Unlock()
			return result{}, ctx.Err()
		}
		c.mu.Unlock()
		// The answer was taken by the reader just before: it is on its way.
		r := <-cl.ch
		return r, r.err
	}
}

func encodeRequest(req *wireRequest) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(req); err != nil { // appends the '\n'
		return nil, &Error{Code: "bad_request", Message: err.Error()}
	}
	// The daemon's --max-line-bytes does not count the newline.
	if n := buf.Len() - 1; n > MaxRequestBytes {
		return nil, &Error{Code: "too_large", Message: fmt.Sprintf(
			"request line of %d bytes is over %d (not sent)", n, MaxRequestBytes)}
	}
	return buf.Bytes(), nil
}

// fail stops the client: the first reason wins. A lost connection carries
// the daemon's id-less error, if it sent one.
func (c *Client) fail(reason error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if ce, ok := reason.(*connError); ok && ce.daemon == nil && c.daemonErr != nil {
		reason = &connError{err: ce.err, daemon: c.daemonErr}
	}
	c.err = reason
	pending := c.pending
	locks := c.locks
	c.pending = make(map[uint64]*call)
	c.locks = make(map[string]*Lock)
	c.queue = nil
	close(c.done)
	c.mu.Unlock()

	c.conn.Close()
	for _, cl := range pending {
		if !cl.abandoned {
			cl.ch <- result{err: reason}
		}
	}
	for _, l := range locks {
		l.end(reason, true)
	}
}

func (c *Client) writeLoop() {
	defer close(c.writerDone)
	var buf []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		c.mu.Lock()
		queue := c.queue
		c.queue = nil
		buf = buf[:0]
		for _, cl := range queue {
			if cl.abandoned { // given up before it was sent: never send it
				delete(c.pending, cl.id)
				continue
			}
			buf = append(buf, cl.line...)
		}
		c.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := c.conn.Write(buf); err != nil {
			// The daemon may have closed after answering why (an id-less
			// error, e.g. limit): let the reader get to it first, so that
			// the calls fail with that reason. It ends at the daemon's
			// close; the bound is for a write failing otherwise.
			t := time.NewTimer(writeFailGrace)
			select {
			case <-c.readerDone:
			case <-t.C:
			}
			t.Stop()
			c.fail(&connError{err: err})
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

func (c *Client) readLoop() {
	defer close(c.readerDone)
	br := bufio.NewReaderSize(c.conn, 64<<10)
	for {
		line, err := readLine(br, maxResponseBytes)
		if err != nil {
			c.fail(&connError{err: err})
			return
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := c.dispatch(line); err != nil {
			c.fail(&connError{err: err})
			return
		}
	}
}

// readLine returns one line without its '\n'; a partial last line is an
// error (io.EOF or the read error).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var long []byte
	for {
		frag, err := br.ReadSlice('\n')
		if err == nil {
			if long == nil {
				return frag[:len(frag)-1], nil
			}
			return append(long, frag[:len(frag)-1]...), nil
		}
		if err != bufio.ErrBufferFull {
			return nil, err
		}
		long = append(long, frag...)
		if len(long) > max {
			return nil, fmt.Errorf("%w: answer line over %d bytes", ErrProtocol, max)
		}
	}
}

func (c *Client) dispatch(line []byte) error {
	r, err := decodeResponse(line)
	if err != nil {
		return err
	}
	if r.Event != "" {
		if r.Event == "lost" {
			c.mu.Lock()
			l := c.locks[r.Lock]
			c.mu.Unlock()
			if l != nil {
				l.drop(ErrLost, true)
			}
		}
		return nil // events this version does not know are ignored
	}
	if r.ID == nil || string(r.ID) == "null" {
		// A line the daemon could not take (too_large, unparseable) or a
		// connection over --max-connections (limit) is answered without an
		// id, and the daemon closes the connection next: keep the error,
		// so the calls in flight fail with it rather than a bare EOF.
		if e, ok := r.error().(*Error); ok {
			c.mu.Lock()
			c.daemonErr = e
			c.mu.Unlock()
		}
		return nil
	}
	id, err := strconv.ParseUint(string(r.ID), 10, 64)
	if err != nil {
		return nil // not one of ours
	}
	c.mu.Lock()
	cl := c.pending[id]
	if cl == nil {
		c.mu.Unlock()
		return nil
	}
	delete(c.pending, id)
	abandoned := cl.abandoned
	c.mu.Unlock()

	res := c.settle(cl, r, abandoned)
	if !abandoned {
		cl.ch <- res
	}
	return nil
}

// settle turns an answer into a result and keeps the lock bookkeeping, on
// the reader goroutine (so a lost event is never seen before the lock).
func (c *Client) settle(cl *call, r *wireResponse, abandoned bool) result {
	res := result{resp: r, err: r.error()}
	switch cl.op {
	case "acquire":
		if res.err != nil {
			break
		}
		if r.Lock == "" || r.ValidityMS == nil {
			res.err = fmt.Errorf("%w: acquire answer without lock or validity_ms", ErrProtocol)
			break
		}
		if abandoned {
			// The caller gave up before the daemon granted it: give it back.
			go c.releaseToken(r.Lock, cl.resource)
			break
		}
		res.lock = c.newLock(cl, r)
	case "release", "complete":
		if res.err == nil {
			cl.lock.drop(ErrReleased, false)
		} else if errors.Is(res.err, ErrNotHeld) {
			cl.lock.drop(ErrLost, true)
		}
	case "extend":
		if res.err == nil && r.ValidityMS != nil {
			cl.lock.extended(cl.start, time.Duration(*r.ValidityMS)*time.Millisecond)
		} else if errors.Is(res.err, ErrNotHeld) {
			cl.lock.drop(ErrLost, true)
		}
	}
	return res
}

func (c *Client) releaseToken(token, resource string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = c.do(ctx, &call{op: "release-abandoned", internal: true},
		&wireRequest{Op: "release", Lock: token, Resource: resource})
}

// ---- wire format --------------------------------------------------------

type wireRequest struct {
	Op       string `json:"op"`
	ID       uint64 `json:"id"`
	Resource string `json:"resource,omitempty"`
	Lock     string `json:"lock,omitempty"`
	TTL      int64  `json:"ttl_ms,omitempty"`
	Wait     int64  `json:"wait_ms,omitempty"`
	Renew    bool   `json:"renew,omitempty"`
	RenewMax int64  `json:"renew_max_ms,omitempty"`
	Fence    bool   `json:"fence,omitempty"`
	Keep     int64  `json:"keep_ms,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	Cursor   string `json:"cursor,omitempty"`
	Permits  int    `json:"permits,omitempty"`
	Permit   *int   `json:"permit,omitempty"`
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type wireNode struct {
	Addr        string   `json:"addr"`
	Up          bool     `json:"up"`
	State       string   `json:"state"`
	LastError   *string  `json:"last_error"`
	RTTms       *float64 `json:"rtt_ms"`
	Quarantined bool     `json:"quarantined"`
	TLS         string   `json:"tls"`
	Eviction    string   `json:"eviction"`
	Refusing    string   `json:"refusing"`
}

type wireResponse struct {
	ID         json.RawMessage `json:"id"` // nil when absent, "null" when null
	Event      string          `json:"event"`
	OK         *bool           `json:"ok"`
	Lock       string          `json:"lock"`
	Resource   *string         `json:"resource"`
	ValidityMS *int64          `json:"validity_ms"`
	Fence      *int64          `json:"fence"`
	Permit     *int            `json:"permit"`
	Error      *wireError      `json:"error"`
	Quorum     int             `json:"quorum"`
	Nodes      wireNodes       `json:"nodes"`
	raw        []byte          // the whole line, for locks and inspect
}

// wireNodes is health's node array; inspect's "nodes" is a count, which
// leaves it empty.
type wireNodes []wireNode

func (n *wireNodes) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '[' {
		return nil
	}
	var v []wireNode
	err := json.Unmarshal(b, &v)
	*n = v
	return err
}

func decodeResponse(line []byte) (*wireResponse, error) {
	var r wireResponse
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("%w: %v in %.200q", ErrProtocol, err, line)
	}
	if r.Event == "" && r.OK == nil {
		return nil, fmt.Errorf("%w: answer without \"ok\": %.200q", ErrProtocol, line)
	}
	r.raw = append([]byte(nil), line...)
	return &r, nil
}

// error maps a failure answer to *Error; nil for success.
func (r *wireResponse) error() error {
	if r.OK != nil && *r.OK {
		return nil
	}
	if r.Error == nil || r.Error.Code == "" {
		return &Error{Code: "internal", Message: "answer with ok:false and no error code"}
	}
	return &Error{Code: r.Error.Code, Message: r.Error.Message}
}

func (r *wireResponse) health() *Health {
	h := &Health{OK: r.OK != nil && *r.OK, Quorum: r.Quorum, Nodes: make([]Node, 0, len(r.Nodes))}
	for _, n := range r.Nodes {
		node := Node{Addr: n.Addr, Up: n.Up, State: n.State, Quarantined: n.Quarantined, TLS: n.TLS, Eviction: n.Eviction, Refusing: n.Refusing, RTT: -1}
		if n.LastError != nil {
			node.LastError = *n.LastError
		}
		if n.RTTms != nil && *n.RTTms >= 0 {
			node.RTT = time.Duration(*n.RTTms * float64(time.Millisecond))
		}
		h.Nodes = append(h.Nodes, node)
	}
	return h
}

// durMS converts to whole milliseconds, rounding away from zero so that a
// positive duration never becomes 0 (which means "default" on the wire).
func durMS(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	} else if d%time.Millisecond < 0 {
		ms--
	}
	return ms
}
