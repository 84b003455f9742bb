package redlockd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	redlockd "github.com/redlockd/redlockd/clients/go"
)

// fakeBotAPI answers getUpdates like Telegram: one long poll at a time (a
// second gets 409 Conflict), updates kept until an offset confirms them;
// polls last at most 300 ms.
type fakeBotAPI struct {
	mu      sync.Mutex
	wake    chan struct{}
	updates []int64
	next    int64
	polling bool
}

func (f *fakeBotAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if f.polling {
		f.mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		fmt.Fprint(w, `{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates request"}`)
		return
	}
	f.polling = true
	if off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64); err == nil {
		kept := f.updates[:0]
		for _, id := range f.updates {
			if id >= off {
				kept = append(kept, id)
			}
		}
		f.updates = kept
	}
	wake := f.wake
	empty := len(f.updates) == 0
	f.mu.Unlock()
	if empty {
		select {
		case <-wake:
		case <-time.After(300 * time.Millisecond):
		case <-r.Context().Done():
		}
	}
	f.mu.Lock()
	var out struct {
		OK     bool `json:"ok"`
		Result []struct {
			UpdateID int64 `json:"update_id"`
		} `json:"result"`
	}
	out.OK = true
	for _, id := range f.updates {
		out.Result = append(out.Result, struct {
			UpdateID int64 `json:"update_id"`
		}{id})
	}
	f.polling = false
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(out)
}

func (f *fakeBotAPI) push(n int) []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []int64
	for i := 0; i < n; i++ {
		f.updates = append(f.updates, f.next)
		ids = append(ids, f.next)
		f.next++
	}
	close(f.wake)
	f.wake = make(chan struct{})
	return ids
}

// TestPollerExample runs the poller of ExampleClient_Campaign twice (two
// clients, as two instances would) against the fake Bot API: one polls,
// each update is handled once, and when the leader's connection closes
// (its process died) the other takes over.
func TestPollerExample(t *testing.T) {
	sock := redlockd.SharedSocketForTest(t)
	api := &fakeBotAPI{wake: make(chan struct{}), next: 7000}
	srv := httptest.NewServer(api)
	defer srv.Close()
	token := fmt.Sprintf("%d:test", time.Now().UnixNano()%1e9)

	var mu sync.Mutex
	handled := map[int][]int64{}
	var clients [2]*redlockd.Client
	done := make(chan error, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for k := 0; k < 2; k++ {
		c, err := redlockd.Dial(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[k] = c
		k := k
		go func() {
			done <- runPoller(ctx, c, srv.URL, token, func(id, fence int64) {
				mu.Lock()
				handled[k] = append(handled[k], id)
				mu.Unlock()
			})
		}()
	}
	all := func() []int64 {
		mu.Lock()
		defer mu.Unlock()
		out := append(append([]int64{}, handled[0]...), handled[1]...)
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	waitAll := func(n int) {
		deadline := time.Now().Add(30 * time.Second)
		for len(all()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("handled %v, want %d updates", all(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := api.push(5)
	waitAll(5)
	mu.Lock()
	leader := 0
	if len(handled[1]) > 0 {
		leader = 1
	}
	both := len(handled[0]) > 0 && len(handled[1]) > 0
	mu.Unlock()
	if both {
		t.Fatalf("both instances polled: %v", handled)
	}
	clients[leader].Close() // the leader's process is gone
	if err := <-done; err == nil {
		t.Fatal("the closed leader's poller returned nil")
	}
	second := api.push(5)
	waitAll(10)
	time.Sleep(200 * time.Millisecond) // a duplicate would show up now
	got := all()
	want := append(append([]int64{}, first...), second...)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handled %v, want each of %v once", got, want)
	}
	mu.Lock()
	other := handled[1-leader]
	mu.Unlock()
	if fmt.Sprint(other) != fmt.Sprint(second) {
		t.Fatalf("the standby handled %v, want %v", other, second)
	}
}

// TestPollerExampleFailedPoll: a poll Telegram refuses (401 for a wrong
// BOT_TOKEN) is logged and retried after a pause. The example took any
// non-409 answer as an empty batch and polled again at once, without a
// word: a wrong token hammered the Bot API in a tight loop.
func TestPollerExampleFailedPoll(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
	}))
	defer srv.Close()
	var logged bytes.Buffer
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pollWhileLeading(ctx, nil, srv.URL, "1:wrong", 0, func(id, fence int64) {})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(at)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(at) < 2 {
		t.Fatalf("%d polls within 10 s", len(at))
	}
	// A lower bound set by the example's own pause, never by speed.
	if gap := at[1].Sub(at[0]); gap < 500*time.Millisecond {
		t.Errorf("polled again %v after a 401: no pause (%d polls)", gap, len(at))
	}
	if !strings.Contains(logged.String(), "getUpdates: 401 Unauthorized: Unauthorized") {
		t.Errorf("the 401 was not logged: %q", logged.String())
	}
}
