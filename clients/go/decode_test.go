package redlockd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests need no daemon.

type responseVector struct {
	Name     string          `json:"name"`
	Kind     string          `json:"kind"`
	Response json.RawMessage `json:"response"`
	Event    json.RawMessage `json:"event"`
	Health   json.RawMessage `json:"health"`
	Expect   string          `json:"expect"`
}

// TestSharedResponseVectors decodes every line of
// proto/vectors/responses.json the way the client does and checks the
// result against the input object the daemon encoded it from.
func TestSharedResponseVectors(t *testing.T) {
	data, err := os.ReadFile(vectorsPath("responses.json"))
	if err != nil {
		t.Fatalf("shared vectors: %v", err)
	}
	var vs []responseVector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 10 {
		t.Fatalf("only %d response vectors", len(vs))
	}
	for _, v := range vs {
		v := v
		t.Run(v.Name, func(t *testing.T) {
			r, err := decodeResponse([]byte(v.Expect))
			if err != nil {
				t.Fatal(err)
			}
			switch v.Kind {
			case "response":
				checkResponse(t, r, v.Response)
			case "event":
				var in struct{ Event, Lock, Resource string }
				if err := json.Unmarshal(v.Event, &in); err != nil {
					t.Fatal(err)
				}
				if r.Event != in.Event || r.Lock != in.Lock || r.Resource == nil || *r.Resource != in.Resource {
					t.Fatalf("event decoded as %+v, want %+v", r, in)
				}
			case "health":
				checkHealth(t, r, v.Health)
			default:
				t.Fatalf("unknown kind %q", v.Kind)
			}
		})
	}
}

func checkResponse(t *testing.T, r *wireResponse, raw json.RawMessage) {
	var in struct {
		ID         *string `json:"id"`
		Error      *string `json:"error"`
		Message    *string `json:"message"`
		Lock       *string `json:"lock"`
		Resource   *string `json:"resource"`
		ValidityMS int64   `json:"validity_ms"`
		Fence      *int64  `json:"fence"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	if in.ID == nil {
		if r.ID != nil {
			t.Errorf("id %s, want none", r.ID)
		}
	} else if string(r.ID) != *in.ID {
		// The id comes back as JSON text; equal values may be escaped
		// differently, so compare decoded values.
		var a, b interface{}
		if json.Unmarshal(r.ID, &a) != nil || json.Unmarshal([]byte(*in.ID), &b) != nil || a != b {
			t.Errorf("id %s, want %s", r.ID, *in.ID)
		}
	}
	err := r.error()
	if in.Error != nil {
		var e *Error
		if !errors.As(err, &e) || e.Code != *in.Error || e.Message == "" {
			t.Fatalf("error %v, want code %s", err, *in.Error)
		}
		if in.Message != nil && e.Message != *in.Message {
			t.Errorf("message %q, want %q", e.Message, *in.Message)
		}
		if !errors.Is(err, &Error{Code: *in.Error}) {
			t.Errorf("errors.Is by code fails for %v", err)
		}
		if s := sentinel(*in.Error); s == nil || !errors.Is(err, s) {
			t.Errorf("no sentinel matches %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("success decoded as %v", err)
	}
	if in.Lock != nil && r.Lock != *in.Lock {
		t.Errorf("lock %q, want %q", r.Lock, *in.Lock)
	}
	if (in.Resource == nil) != (r.Resource == nil) || (in.Resource != nil && *in.Resource != *r.Resource) {
		t.Errorf("resource %v, want %v", r.Resource, in.Resource)
	}
	if in.Lock != nil && (r.ValidityMS == nil || *r.ValidityMS != in.ValidityMS) {
		t.Errorf("validity_ms %v, want %d", r.ValidityMS, in.ValidityMS)
	}
	if (in.Fence == nil) != (r.Fence == nil) || (in.Fence != nil && *in.Fence != *r.Fence) {
		t.Errorf("fence %v, want %v", r.Fence, in.Fence)
	}
}

func sentinel(code string) error {
	for _, s := range []*Error{ErrBadRequest, ErrNotHeld, ErrBusy, ErrDone, ErrTooLarge, ErrLimit,
		ErrNoQuorum, ErrShuttingDown, ErrInternal} {
		if s.Code == code {
			return s
		}
	}
	return nil
}

func checkHealth(t *testing.T, r *wireResponse, raw json.RawMessage) {
	var in struct {
		OK     bool `json:"ok"`
		Quorum int  `json:"quorum"`
		Nodes  []struct {
			Addr        string   `json:"addr"`
			Up          bool     `json:"up"`
			State       *string  `json:"state"`
			LastError   *string  `json:"last_error"`
			RTTms       *float64 `json:"rtt_ms"`
			Quarantined bool     `json:"quarantined"`
			TLS         string   `json:"tls"`
			Eviction    string   `json:"eviction"`
			Refusing    string   `json:"refusing"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	h := r.health()
	err := r.error()
	if h.OK != in.OK || h.Quorum != in.Quorum || len(h.Nodes) != len(in.Nodes) {
		t.Fatalf("health %+v, want %+v", h, in)
	}
	if in.OK != (err == nil) || (!in.OK && !errors.Is(err, ErrNoQuorum)) {
		t.Errorf("health ok=%v gave error %v", in.OK, err)
	}
	for i, n := range in.Nodes {
		g := h.Nodes[i]
		state := "down"
		if n.Up {
			state = "up"
		}
		if n.State != nil {
			state = *n.State
		}
		lastErr := ""
		if n.LastError != nil {
			lastErr = *n.LastError
		}
		if g.Addr != n.Addr || g.Up != n.Up || g.State != state || g.LastError != lastErr || g.Quarantined != n.Quarantined || g.TLS != n.TLS || g.Eviction != n.Eviction || g.Refusing != n.Refusing {
			t.Errorf("node %d: %+v, want %+v", i, g, n)
		}
		if n.RTTms == nil || *n.RTTms < 0 {
			if g.RTT != -1 {
				t.Errorf("node %d: rtt %v, want unknown (-1)", i, g.RTT)
			}
		} else if d := g.RTT - time.Duration(*n.RTTms*float64(time.Millisecond)); d > 2*time.Microsecond || d < -2*time.Microsecond {
			t.Errorf("node %d: rtt %v, want %vms", i, g.RTT, *n.RTTms)
		}
	}
}

func TestDurMS(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {time.Nanosecond, 1}, {10 * time.Millisecond, 10}, {10*time.Millisecond + 1, 11},
		{-time.Nanosecond, -1}, {-2 * time.Millisecond, -2}, {time.Hour, 3600000}} {
		if got := durMS(c.d); got != c.want {
			t.Errorf("durMS(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// fakeDaemon answers over a net.Pipe with a script.
func fakeDaemon(t *testing.T, serve func(br *bufio.Reader, w net.Conn)) *Client {
	t.Helper()
	a, b := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer b.Close()
		serve(bufio.NewReader(b), b)
	}()
	c := NewClient(a)
	t.Cleanup(func() {
		c.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("fake daemon did not stop")
		}
	})
	return c
}

func readReq(t *testing.T, br *bufio.Reader) map[string]interface{} {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil
	}
	var m map[string]interface{}
	if err := json.Unmarshal(line, &m); err != nil {
		t.Errorf("request %q is not JSON: %v", line, err)
	}
	return m
}

// Answers out of order reach the right callers; a lost event ends the
// right lock; an answer for an abandoned acquire is released.
func TestOutOfOrderAndEvents(t *testing.T) {
	released := make(chan map[string]interface{}, 1)
	c := fakeDaemon(t, func(br *bufio.Reader, w net.Conn) {
		var reqs []map[string]interface{}
		for i := 0; i < 3; i++ {
			reqs = append(reqs, readReq(t, br))
		}
		// Answer in reverse order; every acquire gets a lock named after it.
		for i := len(reqs) - 1; i >= 0; i-- {
			id := strconv.FormatFloat(reqs[i]["id"].(float64), 'f', -1, 64)
			res := reqs[i]["resource"].(string)
			tok := strings.Repeat(res[len(res)-1:], 32)
			w.Write([]byte(`{"id":` + id + `,"ok":true,"lock":"` + tok + `","resource":"` + res + `","validity_ms":5000,"fence":` + id + "}\n"))
		}
		w.Write([]byte(`{"event":"lost","lock":"` + strings.Repeat("b", 32) + `","resource":"rb"}` + "\n"))
		w.Write([]byte(`{"event":"future","x":1}` + "\n"))
		// An acquire the caller gives up on, answered later.
		r := readReq(t, br)
		time.Sleep(200 * time.Millisecond)
		id := strconv.FormatFloat(r["id"].(float64), 'f', -1, 64)
		w.Write([]byte(`{"id":` + id + `,"ok":true,"lock":"` + strings.Repeat("d", 32) + `","resource":"rd","validity_ms":5000}` + "\n"))
		released <- readReq(t, br)
		for { // Close releases what is still held: say ok
			r := readReq(t, br)
			if r == nil {
				return
			}
			id := strconv.FormatFloat(r["id"].(float64), 'f', -1, 64)
			w.Write([]byte(`{"id":` + id + `,"ok":true}` + "\n"))
		}
	})
	type got struct {
		l   *Lock
		err error
	}
	outs := make([]chan got, 3)
	for i, r := range []string{"ra", "rb", "rc"} {
		outs[i] = make(chan got, 1)
		go func(r string, ch chan got) {
			l, err := c.Acquire(tctx(t), r, AcquireOptions{Fence: true})
			ch <- got{l, err}
		}(r, outs[i])
		time.Sleep(20 * time.Millisecond) // keep the send order
	}
	var locks []*Lock
	for i, r := range []string{"ra", "rb", "rc"} {
		g := <-outs[i]
		if g.err != nil || g.l.Resource != r || g.l.Token != strings.Repeat(r[1:], 32) {
			t.Fatalf("acquire %s: %+v %v", r, g.l, g.err)
		}
		locks = append(locks, g.l)
	}
	select {
	case <-locks[1].Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("lost event did not end the lock")
	}
	if !errors.Is(locks[1].Err(), ErrLost) || locks[0].Err() != nil || locks[2].Err() != nil {
		t.Fatalf("errs %v %v %v", locks[0].Err(), locks[1].Err(), locks[2].Err())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(ctx, "rd", AcquireOptions{}); err != context.DeadlineExceeded {
		t.Fatalf("abandoned acquire: %v", err)
	}
	select {
	case r := <-released:
		if r["op"] != "release" || r["lock"] != strings.Repeat("d", 32) || r["resource"] != "rd" {
			t.Fatalf("after the late grant the client sent %v", r)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("late grant of an abandoned acquire not released")
	}
}

// A broken connection fails calls in flight and ends locks with an error
// matching ErrClosed.
func TestConnectionLost(t *testing.T) {
	c := fakeDaemon(t, func(br *bufio.Reader, w net.Conn) {
		r := readReq(t, br)
		id := strconv.FormatFloat(r["id"].(float64), 'f', -1, 64)
		w.Write([]byte(`{"id":` + id + `,"ok":true,"lock":"` + strings.Repeat("e", 32) + `","resource":"re","validity_ms":5000}` + "\n"))
		readReq(t, br) // the ping, never answered
	})
	l, err := c.Acquire(tctx(t), "re", AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Ping(tctx(t))
	if !errors.Is(err, ErrClosed) || err == ErrClosed {
		t.Fatalf("ping on a dropped connection: %v", err)
	}
	if !errors.Is(l.Err(), ErrClosed) {
		t.Fatalf("lock: %v", l.Err())
	}
	<-l.Lost()
	if !errors.Is(c.Err(), ErrClosed) {
		t.Fatal(c.Err())
	}
}

// A garbled answer line stops the client rather than mismatching answers.
func TestProtocolError(t *testing.T) {
	c := fakeDaemon(t, func(br *bufio.Reader, w net.Conn) {
		readReq(t, br)
		w.Write([]byte("this is not json\n"))
		for readReq(t, br) != nil {
		}
	})
	err := c.Ping(tctx(t))
	if !errors.Is(err, ErrProtocol) || !errors.Is(err, ErrClosed) {
		t.Fatalf("ping: %v", err)
	}
}
