package redlockd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"
)

// Daemon behaviour checked on raw connections, without the client's help.

type rawConn struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func rawDial(t *testing.T, d *daemon) *rawConn {
	t.Helper()
	conn, err := net.DialTimeout("unix", d.sock, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, conn: conn, br: bufio.NewReader(conn)}
}

func (r *rawConn) send(format string, args ...interface{}) {
	r.t.Helper()
	_ = r.conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(r.conn, format+"\n", args...); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) recv(timeout time.Duration) map[string]interface{} {
	r.t.Helper()
	_ = r.conn.SetReadDeadline(time.Now().Add(timeout))
	line, err := r.br.ReadBytes('\n')
	if err != nil {
		r.t.Fatalf("no answer: %v", err)
	}
	var m map[string]interface{}
	if err := json.Unmarshal(line, &m); err != nil {
		r.t.Fatalf("answer %q: %v", line, err)
	}
	return m
}

func code(m map[string]interface{}) string {
	if e, ok := m["error"].(map[string]interface{}); ok {
		return fmt.Sprint(e["code"])
	}
	return ""
}

// proto/README.md: session locks "are released on all nodes as soon as
// their connection closes". Checked for a plain close and for a connection that
// closes while one of its acquires is waiting (wait_ms) on a busy resource.
func TestDaemonSessionReleaseOnClose(t *testing.T) {
	d := sharedDaemon(t)
	for _, waiting := range []bool{false, true} {
		waiting := waiting
		t.Run(fmt.Sprintf("waiter_in_flight=%v", waiting), func(t *testing.T) {
			r, busy := rname(t), rname(t)
			holder := rawDial(t, d)
			holder.send(`{"op":"acquire","id":1,"resource":%q,"ttl_ms":60000}`, busy)
			if m := holder.recv(5 * time.Second); m["ok"] != true {
				t.Fatal(m)
			}
			owner := rawDial(t, d)
			owner.send(`{"op":"acquire","id":1,"resource":%q,"ttl_ms":60000}`, r)
			if m := owner.recv(5 * time.Second); m["ok"] != true {
				t.Fatal(m)
			}
			if waiting {
				owner.send(`{"op":"acquire","id":2,"resource":%q,"wait_ms":20000}`, busy)
				time.Sleep(200 * time.Millisecond)
			}
			owner.conn.Close()
			start := time.Now()
			other := rawDial(t, d)
			other.send(`{"op":"acquire","id":1,"resource":%q,"wait_ms":3000}`, r)
			m := other.recv(10 * time.Second)
			if m["ok"] != true {
				t.Fatalf("the closed connection's 60 s lock was not released: after %v another owner got %v",
					time.Since(start).Round(time.Millisecond), m)
			}
			other.send(`{"op":"release","id":2,"lock":%q}`, m["lock"])
			other.recv(5 * time.Second)
		})
	}
}
