package redlockd

import "errors"

// Error is an error answered by the daemon: {"ok":false,"error":{"code":..,"message":..}}.
//
// Match it with errors.Is against the sentinels below (errors.Is(err, ErrBusy))
// or with errors.As to read Code and Message. Match on Code, never on Message:
// messages are for people and may change.
type Error struct {
	Code    string // "busy", "not_held", ... (see the protocol's error table)
	Message string // human-readable; may be empty for the sentinels
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "redlockd: " + e.Code
	}
	return "redlockd: " + e.Code + ": " + e.Message
}

// Is reports whether target is an *Error with the same Code and either no
// Message (the sentinels) or the same Message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok || t == nil {
		return false
	}
	return t.Code == e.Code && (t.Message == "" || t.Message == e.Message)
}

// Sentinels for the daemon's error codes, for use with errors.Is.
var (
	ErrBadRequest   = &Error{Code: "bad_request"}   // malformed request or bad field
	ErrNotHeld      = &Error{Code: "not_held"}      // unknown token, expired or lost lock
	ErrBusy         = &Error{Code: "busy"}          // held by another owner (after Wait)
	ErrDone         = &Error{Code: "done"}          // resource was completed; mark not expired
	ErrTooLarge     = &Error{Code: "too_large"}     // request over the daemon's size limit
	ErrLimit        = &Error{Code: "limit"}         // too many connections, locks or waiters
	ErrNoQuorum     = &Error{Code: "no_quorum"}     // fewer than a quorum of nodes answered
	ErrShuttingDown = &Error{Code: "shutting_down"} // the daemon is stopping
	ErrInternal     = &Error{Code: "internal"}      // a daemon bug (it logs it)
)

// Client-side conditions.
var (
	// ErrClosed: the client was closed (Close), or its connection was lost
	// (errors.Is(err, ErrClosed) holds for both; the latter also wraps the
	// I/O error). In-flight calls fail with it. When the daemon answered
	// why before closing (an error without an id: limit, too_large,
	// bad_request), a lost connection matches that *Error too
	// (errors.Is(err, ErrLimit), errors.As).
	ErrClosed = errors.New("redlockd: client closed")

	// ErrLost: the daemon sent {"event":"lost"} for the lock: its renewal
	// could not keep a quorum. Lock.Err returns it.
	ErrLost = errors.New("redlockd: lock lost")

	// ErrExpired: the lock's validity ran out on the client's clock without
	// an extend (a lock taken without Renew, or past RenewMax).
	ErrExpired = errors.New("redlockd: lock validity expired")

	// ErrReleased: the lock was given back by Release or Complete.
	ErrReleased = errors.New("redlockd: lock released")

	// ErrProtocol: the daemon sent something this client cannot parse.
	ErrProtocol = errors.New("redlockd: protocol error")
)

// connError is how a lost connection fails calls and locks: errors.Is(err,
// ErrClosed) is true and errors.Unwrap gives the I/O error. daemon is the
// error the daemon answered without an id before it closed (nil if none):
// errors.Is and errors.As match it as well.
type connError struct {
	err    error
	daemon *Error
}

func (e *connError) Error() string {
	if e.daemon != nil {
		return e.daemon.Error() + " (the daemon closed the connection: " + e.err.Error() + ")"
	}
	return "redlockd: connection lost: " + e.err.Error()
}

func (e *connError) Unwrap() error { return e.err }

func (e *connError) Is(t error) bool {
	return t == ErrClosed || (e.daemon != nil && e.daemon.Is(t))
}

func (e *connError) As(target interface{}) bool {
	if p, ok := target.(**Error); ok && e.daemon != nil {
		*p = e.daemon
		return true
	}
	return false
}
