package redlockd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	redlockd "github.com/redlockd/redlockd/clients/go"
)

// Examples are compiled by go test but not run (they need a daemon).

func Example() {
	ctx := context.Background()
	c, err := redlockd.Dial(ctx, "") // $REDLOCKD_SOCKET or ./redlockd.sock
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	err = c.WithLock(ctx, "orders:42", redlockd.AcquireOptions{TTL: 10 * time.Second, Renew: true},
		func(ctx context.Context) error {
			return processOrder(ctx, 42) // ctx is cancelled if the lock is lost
		})
	if errors.Is(err, redlockd.ErrBusy) {
		fmt.Println("someone else is on it")
	}
}

func processOrder(ctx context.Context, id int) error { return nil }

// The idempotency pattern: one handler per update, even with duplicate
// deliveries.
func ExampleClient_Complete() {
	ctx := context.Background()
	c, err := redlockd.Dial(ctx, "/run/redlockd.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "tg:update:123456", redlockd.AcquireOptions{TTL: time.Minute})
	switch {
	case errors.Is(err, redlockd.ErrBusy), errors.Is(err, redlockd.ErrDone):
		return // a duplicate: running elsewhere, or already handled
	case err != nil:
		log.Fatal(err)
	}
	// ... handle the update ...
	if err := c.Complete(ctx, l, 24*time.Hour); err != nil {
		log.Print(err)
	}
}

func ExampleClient_Acquire_fence() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := redlockd.Dial(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// Wait up to 3 s for the resource; ask for a fencing token.
	l, err := c.Acquire(ctx, "report:daily", redlockd.AcquireOptions{Wait: 3 * time.Second, Fence: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Release(context.Background(), l)
	fmt.Println("write with fence", l.Fence, "before", l.Acquired.Add(l.Validity))
}
