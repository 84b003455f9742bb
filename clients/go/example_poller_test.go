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
	token := os.Getenv("BOT_TOKEN")
	offset := int64(0)
	for {
		ld, err := c.Campaign(ctx, "tg:poller:"+strings.SplitN(token, ":", 2)[0], 5*time.Second)
		if err != nil {
			log.Fatal(err) // the client closed, or the daemon refuses
		}
		offset = pollWhileLeading(ld.Context(), c, token, offset) // returns when leadership ends
		_ = ld.Resign(ctx)
	}
}

func pollWhileLeading(ctx context.Context, c *redlockd.Client, token string, offset int64) int64 {
	for ctx.Err() == nil {
		url := fmt.Sprintf("https://api.telegram.org/bot%s/getUpdates?timeout=20&offset=%d", token, offset)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req) // cancelled when leadership ends
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		var body struct {
			Result []struct {
				UpdateID int64 `json:"update_id"`
			} `json:"result"`
		}
		conflict := resp.StatusCode == http.StatusConflict
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if conflict { // the old leader's poll is still open
			time.Sleep(time.Second)
			continue
		}
		for _, u := range body.Result {
			if ctx.Err() != nil {
				break // not confirmed: the next leader gets it
			}
			handleOnce(ctx, c, u.UpdateID)
			offset = u.UpdateID + 1
		}
	}
	return offset
}

// handleOnce is the seed pattern: acquire tg:update:<id>, handle, complete.
func handleOnce(ctx context.Context, c *redlockd.Client, id int64) {
	l, err := c.Acquire(ctx, fmt.Sprintf("tg:update:%d", id),
		redlockd.AcquireOptions{TTL: time.Minute, Renew: true, Fence: true})
	if errors.Is(err, redlockd.ErrBusy) || errors.Is(err, redlockd.ErrDone) {
		return // a duplicate: running elsewhere, or handled
	}
	if err != nil {
		log.Print(err)
		return
	}
	// ... handle the update under l.Context() (it ends if the lock is lost),
	// passing l.Fence to what it writes ...
	if err := c.Complete(ctx, l, 24*time.Hour); err != nil {
		log.Print(err) // not marked: a redelivery may run it again
	}
}
