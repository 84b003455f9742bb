package redlockd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	redlockd "github.com/redlockd/redlockd/clients/go"
)

// One getUpdates poller across every instance of a bot, each update handled
// once.
//
// Telegram serves one getUpdates long poll per bot token at a time: a
// second poller makes one of them fail with "409 Conflict: terminated by
// other getUpdates request" (a webhook set on the bot gives 409 as well),
// and the two steal updates from each other. So one instance leads and
// polls; the others wait in the daemon's line (Campaign) and take over when
// it resigns, dies, or loses the lock (its Context ends).
//
// A poll the old leader sent may still be open when the new leader polls:
// that gets a 409 once; wait a moment and poll again. Updates the old leader
// fetched but did not confirm (a poll confirms every update below its
// offset) come again to the new leader: hence the seed pattern beside the
// leader, acquire tg:update:<id>, handle, Complete; a duplicate gets ErrBusy
// or ErrDone and is skipped.
func ExampleClient_Campaign() {
	ctx := context.Background()
	c, err := redlockd.Dial(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	api := os.Getenv("TELEGRAM_API_ROOT") // a local Bot API server, or:
	if api == "" {
		api = "https://api.telegram.org"
	}
	err = runPoller(ctx, c, api, os.Getenv("BOT_TOKEN"), func(id, fence int64) {
		fmt.Println("update", id) // ... handle it; pass fence to what it writes ...
	})
	log.Fatal(err) // ctx ended, or the client closed
}

// runPoller leads (waiting its turn), polls while leading, stands by again
// when leadership ends, until ctx ends or Campaign fails.
func runPoller(ctx context.Context, c *redlockd.Client, api, token string, handle func(id, fence int64)) error {
	offset := int64(0)
	for {
		ld, err := c.Campaign(ctx, "tg:poller:"+strings.SplitN(token, ":", 2)[0], 5*time.Second)
		if err != nil {
			return err
		}
		offset = pollWhileLeading(ld.Context(), c, api, token, offset, handle) // until leadership ends
		_ = ld.Resign(ctx)
	}
}

func pollWhileLeading(ctx context.Context, c *redlockd.Client, api, token string, offset int64,
	handle func(id, fence int64)) int64 {
	for ctx.Err() == nil {
		url := fmt.Sprintf("%s/bot%s/getUpdates?timeout=20&offset=%d", api, token, offset)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req) // cancelled when leadership ends
		if err != nil {
			if ctx.Err() == nil {
				log.Printf("getUpdates: %v", err) // Telegram unreachable
			}
			sleepCtx(ctx, time.Second)
			continue
		}
		var body struct {
			Result []struct {
				UpdateID int64 `json:"update_id"`
			} `json:"result"`
			Description string `json:"description"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusConflict { // the old leader's poll is still open
			sleepCtx(ctx, time.Second)
			continue
		}
		if resp.StatusCode != http.StatusOK { // 401: a wrong BOT_TOKEN, ...
			log.Printf("getUpdates: %s: %s", resp.Status, body.Description)
			sleepCtx(ctx, time.Second) // not at once: that would hammer the API
			continue
		}
		for _, u := range body.Result {
			if ctx.Err() != nil {
				break // not confirmed: the next leader gets it
			}
			handleOnce(ctx, c, u.UpdateID, handle)
			offset = u.UpdateID + 1
		}
	}
	return offset
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// handleOnce is the seed pattern: acquire tg:update:<id>, handle, complete.
func handleOnce(ctx context.Context, c *redlockd.Client, id int64, handle func(id, fence int64)) {
	l, err := c.Acquire(ctx, fmt.Sprintf("tg:update:%d", id),
		redlockd.AcquireOptions{TTL: time.Minute, Renew: true, Fence: true})
	if errors.Is(err, redlockd.ErrBusy) || errors.Is(err, redlockd.ErrDone) {
		return // a duplicate: running elsewhere, or handled
	}
	if err != nil {
		log.Print(err)
		return
	}
	handle(id, l.Fence) // l.Context() ends if the lock is lost
	if err := c.Complete(ctx, l, 24*time.Hour); err != nil {
		log.Print(err) // not marked: a redelivery may run it again
	}
}
