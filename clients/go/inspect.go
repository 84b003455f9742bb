package redlockd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// LockEntry is one lock of this daemon's listing. It never carries the
// lock's token: tokens are capabilities.
type LockEntry struct {
	Resource string        `json:"resource"`
	TTL      time.Duration `json:"-"`
	Validity time.Duration `json:"-"` // left, as the daemon counts it
	Renew    bool          `json:"renew"`
	Fence    *int64        `json:"fence"` // nil unless taken with Fence
	Held     time.Duration `json:"-"`     // since the acquisition answered
	Since    time.Time     `json:"-"`     // wall clock of the acquisition
	Owner    LockOwner     `json:"-"`
	Waiters  int           `json:"waiters"` // acquires waiting here for it
}

// LockOwner says who took a listed lock: an HTTP request, or an NDJSON
// connection (with the peer's pid, uid and gid when the daemon could read
// them).
type LockOwner struct {
	HTTP bool
	Conn uint64
	PID  int
	UID  uint32
	GID  uint32
}

// LocksPage is one page of Locks.
type LocksPage struct {
	Locks []LockEntry
	Total int    // locks held through this daemon
	Next  string // "" at the end; else pass as LocksOptions.Cursor
}

// LocksOptions selects a page: a resource prefix, at most Limit entries
// (1..1000; 0 means the daemon's default of 100) after Cursor.
type LocksOptions struct {
	Prefix string
	Limit  int
	Cursor string
}

type wireLockEntry struct {
	Resource   string          `json:"resource"`
	TTLms      int64           `json:"ttl_ms"`
	ValidityMS int64           `json:"validity_ms"`
	Renew      bool            `json:"renew"`
	Fence      *int64          `json:"fence"`
	HeldMS     int64           `json:"held_ms"`
	SinceMS    int64           `json:"since_ms"`
	Owner      json.RawMessage `json:"owner"`
	Waiters    int             `json:"waiters"`
}

// Locks lists one page of the locks held through this daemon, in the order
// they were taken.
func (c *Client) Locks(ctx context.Context, opts LocksOptions) (*LocksPage, error) {
	res, err := c.do(ctx, &call{op: "locks"}, &wireRequest{Op: "locks",
		Prefix: opts.Prefix, Limit: opts.Limit, Cursor: opts.Cursor})
	if err != nil {
		return nil, err
	}
	var w struct {
		Locks []wireLockEntry `json:"locks"`
		Total int             `json:"total"`
		Next  string          `json:"next"`
	}
	if err := json.Unmarshal(res.resp.raw, &w); err != nil {
		return nil, fmt.Errorf("%w: locks: %v", ErrProtocol, err)
	}
	page := &LocksPage{Total: w.Total, Next: w.Next, Locks: make([]LockEntry, 0, len(w.Locks))}
	for _, e := range w.Locks {
		le := LockEntry{Resource: e.Resource, Renew: e.Renew, Fence: e.Fence, Waiters: e.Waiters,
			TTL:      time.Duration(e.TTLms) * time.Millisecond,
			Validity: time.Duration(e.ValidityMS) * time.Millisecond,
			Held:     time.Duration(e.HeldMS) * time.Millisecond,
			Since:    time.UnixMilli(e.SinceMS)}
		var s string
		if json.Unmarshal(e.Owner, &s) == nil {
			le.Owner.HTTP = s == "http"
		} else {
			var o struct {
				Conn uint64 `json:"conn"`
				PID  int    `json:"pid"`
				UID  uint32 `json:"uid"`
				GID  uint32 `json:"gid"`
			}
			if err := json.Unmarshal(e.Owner, &o); err != nil {
				return nil, fmt.Errorf("%w: locks: owner: %v", ErrProtocol, err)
			}
			le.Owner = LockOwner{Conn: o.Conn, PID: o.PID, UID: o.UID, GID: o.GID}
		}
		page.Locks = append(page.Locks, le)
	}
	return page, nil
}

// Inspection is what the nodes say of one resource, by the quorum rules
// of release.
type Inspection struct {
	Resource string
	State    string        // "free", "held" or "done"
	Agree    int           // nodes that said State
	Answered int           // nodes that answered
	Nodes    int           // nodes configured
	PTTL     time.Duration // held, done: smallest remaining PTTL; -1 else
	Mine     bool          // this daemon holds it
	Waiters  int           // acquires waiting here for it
	Fence    *int64        // when asked: every next fenced acquisition exceeds it
}

// Inspect asks every node what it holds for resource (read-only, one
// round). It returns an error matching ErrNoQuorum when no state is on
// more than n - quorum nodes.
func (c *Client) Inspect(ctx context.Context, resource string, fence bool) (*Inspection, error) {
	if !utf8.ValidString(resource) {
		return nil, &Error{Code: "bad_request", Message: "resource: not valid UTF-8 (not sent)"}
	}
	res, err := c.do(ctx, &call{op: "inspect"}, &wireRequest{Op: "inspect", Resource: resource, Fence: fence})
	if err != nil {
		return nil, err
	}
	var w struct {
		Resource string `json:"resource"`
		State    string `json:"state"`
		Agree    int    `json:"agree"`
		Answered int    `json:"answered"`
		Nodes    int    `json:"nodes"`
		PTTLms   *int64 `json:"pttl_ms"`
		Mine     bool   `json:"mine"`
		Waiters  int    `json:"waiters"`
		Fence    *int64 `json:"fence"`
	}
	if err := json.Unmarshal(res.resp.raw, &w); err != nil {
		return nil, fmt.Errorf("%w: inspect: %v", ErrProtocol, err)
	}
	in := &Inspection{Resource: w.Resource, State: w.State, Agree: w.Agree, Answered: w.Answered,
		Nodes: w.Nodes, Mine: w.Mine, Waiters: w.Waiters, Fence: w.Fence, PTTL: -1}
	if w.PTTLms != nil {
		in.PTTL = time.Duration(*w.PTTLms) * time.Millisecond
	}
	return in, nil
}
