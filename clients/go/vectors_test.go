package redlockd

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type requestVector struct {
	Name     string  `json:"name"`
	Op       *string `json:"op"`
	Input    *string `json:"input"`
	InputHex *string `json:"input_hex"`
	Expect   struct {
		OK            bool            `json:"ok"`
		Code          string          `json:"code"`
		Field         *string         `json:"field"`
		Message       *string         `json:"message"`
		MessagePrefix *string         `json:"message_prefix"`
		ID            json.RawMessage `json:"id"`
		NotJSON       bool            `json:"not_json"`
	} `json:"expect"`
}

func vectorsPath(name string) string {
	return filepath.Join("..", "..", "proto", "vectors", name)
}

func loadRequestVectors(t *testing.T) []requestVector {
	t.Helper()
	data, err := os.ReadFile(vectorsPath("requests.json"))
	if err != nil {
		t.Fatalf("shared vectors: %v", err)
	}
	var vs []requestVector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	return vs
}

func (v *requestVector) bytes(t *testing.T) []byte {
	switch {
	case v.Input != nil && v.InputHex == nil:
		return []byte(*v.Input)
	case v.InputHex != nil && v.Input == nil:
		b, err := hex.DecodeString(*v.InputHex)
		if err != nil {
			t.Fatalf("%s: input_hex: %v", v.Name, err)
		}
		return b
	}
	t.Fatalf("%s: needs exactly one of input, input_hex", v.Name)
	return nil
}

// rawAnswer is an answer line kept as JSON text members.
type rawAnswer struct {
	line   string
	fields map[string]json.RawMessage
	code   string
	msg    string
}

func readAnswer(t *testing.T, br *bufio.Reader) (*rawAnswer, error) {
	t.Helper()
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	a := &rawAnswer{line: string(line)}
	if err := json.Unmarshal(line, &a.fields); err != nil {
		t.Fatalf("answer is not a JSON object: %q: %v", line, err)
	}
	if e, ok := a.fields["error"]; ok {
		var we wireError
		if err := json.Unmarshal(e, &we); err != nil {
			t.Fatalf("error member %s: %v", e, err)
		}
		a.code, a.msg = we.Code, we.Message
	}
	return a, nil
}

// TestSharedRequestVectors sends every failing NDJSON vector of
// proto/vectors/requests.json as one raw line on a fresh connection and
// checks the daemon's answer: code, field named in the message, exact
// message (or prefix), the echoed id, and whether the connection goes on
// (a ping answers) or closes (not_json).
func TestSharedRequestVectors(t *testing.T) {
	d := sharedDaemon(t)
	n := 0
	for _, v := range loadRequestVectors(t) {
		v := v
		if v.Op != nil || v.Expect.OK {
			continue // HTTP-route vectors, and successes (not sent: they would take locks)
		}
		input := v.bytes(t)
		if bytes.IndexByte(input, '\n') >= 0 {
			t.Errorf("%s: input holds a newline: not one NDJSON line", v.Name)
			continue
		}
		n++
		t.Run(v.Name, func(t *testing.T) { runRequestVector(t, d, &v, input) })
	}
	if n < 50 {
		t.Fatalf("only %d NDJSON failure vectors found", n)
	}
}

func runRequestVector(t *testing.T, d *daemon, v *requestVector, input []byte) {
	conn, err := net.DialTimeout("unix", d.sock, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)

	// The first byte picks the framing: a line that does not start with
	// '{' would be read as HTTP, so a ping selects NDJSON first.
	if trimmed := bytes.TrimLeft(input, " \t\r"); len(trimmed) == 0 || trimmed[0] != '{' {
		if _, err := conn.Write([]byte("{\"op\":\"ping\",\"id\":\"prime\"}\n")); err != nil {
			t.Fatal(err)
		}
		a, err := readAnswer(t, br)
		if err != nil || string(a.fields["id"]) != `"prime"` {
			t.Fatalf("priming ping: %+v %v", a, err)
		}
	}
	line := append(append([]byte{}, input...), '\n')
	if _, err := conn.Write(line); err != nil {
		t.Fatal(err)
	}
	if len(bytes.TrimSpace(input)) == 0 {
		// Over NDJSON blank lines are skipped, not answered: the next
		// answer is the ping's.
		if _, err := conn.Write([]byte("{\"op\":\"ping\",\"id\":\"after\"}\n")); err != nil {
			t.Fatal(err)
		}
		a, err := readAnswer(t, br)
		if err != nil || string(a.fields["id"]) != `"after"` {
			t.Fatalf("blank line %q: want it skipped, got %+v %v", input, a, err)
		}
		return
	}
	a, err := readAnswer(t, br)
	if err != nil {
		t.Fatalf("no answer to %q: %v", input, err)
	}
	if string(a.fields["ok"]) != "false" || a.code != v.Expect.Code {
		t.Fatalf("sent %q\nanswer %s\nwant code %s", input, a.line, v.Expect.Code)
	}
	if a.msg == "" || len(a.msg) > 256 {
		t.Errorf("message %q: must be 1..256 bytes", a.msg)
	}
	if f := v.Expect.Field; f != nil && !strings.Contains(a.msg, *f) {
		t.Errorf("sent %q\nmessage %q does not name field %q", input, a.msg, *f)
	}
	if m := v.Expect.Message; m != nil && a.msg != *m {
		t.Errorf("sent %q\nmessage %q\nwant    %q", input, a.msg, *m)
	}
	if p := v.Expect.MessagePrefix; p != nil && !strings.HasPrefix(a.msg, *p) {
		t.Errorf("sent %q\nmessage %q, want prefix %q", input, a.msg, *p)
	}
	gotID, hasID := a.fields["id"]
	switch want := string(v.Expect.ID); {
	case want == "null" || want == "":
		if hasID {
			t.Errorf("sent %q\nanswer %s carries id %s, want none", input, a.line, gotID)
		}
	default:
		var wantText string // expect.id is the id's JSON text, as a string
		if err := json.Unmarshal(v.Expect.ID, &wantText); err != nil {
			t.Fatalf("expect.id %s: %v", v.Expect.ID, err)
		}
		if !hasID || string(gotID) != wantText {
			t.Errorf("sent %q\nanswer %s: id %s, want %s", input, a.line, gotID, wantText)
		}
	}

	if v.Expect.NotJSON {
		// Answered once, then closed.
		extra, err := br.ReadBytes('\n')
		if err == nil || !(errors.Is(err, io.EOF) || isConnReset(err)) {
			t.Fatalf("after a non-JSON line: want the connection closed, got %q %v", extra, err)
		}
		return
	}
	if _, err := conn.Write([]byte("{\"op\":\"ping\",\"id\":\"after\"}\n")); err != nil {
		t.Fatalf("connection closed after %q: %v", input, err)
	}
	next, err := readAnswer(t, br)
	if err != nil || string(next.fields["id"]) != `"after"` || string(next.fields["ok"]) != "true" {
		t.Fatalf("after %q the connection should go on; ping got %+v %v", input, next, err)
	}
}

func isConnReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(ne.Err.Error(), "reset")
}
