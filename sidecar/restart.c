/* restart.c: pure rules of a node restart; see restart.h. No I/O, no
 * clock of its own: quarantine.c passes the times in. */
#include "restart.h"

#include <string.h>

enum restart_action restart_action(bool restarted, bool persistent,
                                   bool no_quarantine, bool no_fence_repair)
{
    if (!restarted || persistent) {
        return RESTART_NONE;
    }
    if (!no_quarantine) {
        return RESTART_QUARANTINE;
    }
    return no_fence_repair ? RESTART_COUNT_NOW : RESTART_REPAIR_NOW;
}

uint64_t restart_started_us(uint64_t now_us, uint64_t uptime_s)
{
    uint64_t back_s = uptime_s > 0 ? uptime_s - 1 : 0;
    if (back_s >= now_us / 1000000u) {
        return 1; /* before the daemon's clock began: long ago */
    }
    return now_us - back_s * 1000000u;
}

uint64_t restart_dataset_born_us(uint64_t now_us, long long pttl_ms)
{
    if (pttl_ms < 0) {
        return 0;
    }
    uint64_t left = (uint64_t)pttl_ms;
    uint64_t age_ms =
        left < RESTART_DATASET_TTL_MS ? RESTART_DATASET_TTL_MS - left : 0;
    if (age_ms >= now_us / 1000u) {
        return 1; /* before the daemon's clock began: long ago */
    }
    return now_us - age_ms * 1000u;
}

uint64_t restart_oldest_us(const uint64_t *started_us, int n)
{
    uint64_t oldest = 0;
    for (int i = 0; i < n; i++) {
        uint64_t st = started_us[i];
        if (st != 0 && (oldest == 0 || st < oldest)) {
            oldest = st;
        }
    }
    return oldest;
}

bool restart_fresh_start(uint64_t started_us, uint64_t oldest_us,
                         uint64_t now_us, uint32_t quarantine_ms,
                         uint64_t *left_ms)
{
    uint64_t q_us = (uint64_t)quarantine_ms * 1000u;
    if (started_us > oldest_us + RESTART_START_SKEW_US &&
        now_us < started_us + q_us) {
        *left_ms = (started_us + q_us - now_us) / 1000u;
        return true;
    }
    return false;
}

bool restart_start_unsettled(uint64_t started_us, uint64_t now_us,
                             uint32_t quarantine_ms)
{
    return started_us != 0 &&
           now_us < started_us + (uint64_t)quarantine_ms * 1000u;
}

enum restart_verdict restart_reads_start(const struct restart_reads *r)
{
    if (r->need == 0) {
        return RESTART_RAISE; /* a single node: nothing to read */
    }
    return r->running < r->need ? RESTART_FAIL : RESTART_READING;
}

enum restart_verdict restart_reads_done(struct restart_reads *r)
{
    r->running--;
    r->complete++;
    /* Any N - quorum + 1 sound nodes meet every earlier write-back quorum
     * and every quorum of done marks in a node other than the target, so
     * what they hold covers every fence handed out and every mark that a
     * successful complete left. */
    return r->complete >= r->need ? RESTART_RAISE : RESTART_READING;
}

enum restart_verdict restart_reads_failed(struct restart_reads *r)
{
    r->running--;
    return r->complete + r->running < r->need ? RESTART_FAIL : RESTART_READING;
}

bool restart_raised(int64_t counter, int64_t max)
{
    return counter >= max;
}

const char *restart_scan_cursor(const char *cursor)
{
    if (strcmp(cursor, "0") == 0) {
        return NULL;
    }
    return cursor[0] != '\0' ? cursor : "0";
}

void restart_scan_match(const char *prefix, char *buf, size_t size)
{
    size_t m = 0;
    /* An escaped character takes two bytes, and the suffix must fit. */
    for (const char *p = prefix;
         *p != '\0' && m + 1 + sizeof(RESTART_SCAN_SUFFIX) < size; p++) {
        if (strchr("*?[]\\", *p) != NULL) {
            buf[m++] = '\\';
        }
        buf[m++] = *p;
    }
    memcpy(buf + m, RESTART_SCAN_SUFFIX, sizeof(RESTART_SCAN_SUFFIX));
}

/* ---- a page of the done-mark copy ------------------------------------ */

enum restart_step restart_page_step(size_t keys)
{
    return keys > 0 ? RESTART_STEP_READ : RESTART_STEP_SCAN;
}

long restart_read_marks(size_t elements, size_t keys)
{
    if (elements % 3 != 0 || elements / 3 > keys) {
        return -1;
    }
    return (long)(elements / 3);
}

enum restart_step restart_read_step(long marks)
{
    return marks > 0 ? RESTART_STEP_COPY : RESTART_STEP_SCAN;
}

/* ---- a node's identity ---------------------------------------------- */

void restart_ident_up(struct node_ident *prev, struct node_ident *up,
                      const struct node_ident *last)
{
    *prev = *up;
    memcpy(up->run_id, last->run_id, sizeof(up->run_id));
    memcpy(up->replid, last->replid, sizeof(up->replid));
    if (last->dataset[0] != '\0') {
        memcpy(up->dataset, last->dataset, sizeof(up->dataset));
    }
}

/* Both known, and different. */
static bool ident_changed(const char *before, const char *now)
{
    return before[0] != '\0' && now[0] != '\0' && strcmp(before, now) != 0;
}

bool restart_ident_restarted(const struct node_ident *prev,
                             const struct node_ident *up)
{
    return ident_changed(prev->run_id, up->run_id);
}

bool restart_ident_emptied(const struct node_ident *prev,
                           const struct node_ident *up)
{
    return ident_changed(prev->dataset, up->dataset);
}

bool restart_ident_replaced(const struct node_ident *prev,
                            const struct node_ident *up)
{
    return !restart_ident_restarted(prev, up) &&
           ident_changed(prev->replid, up->replid);
}

bool restart_ident_first(const struct node_ident *prev,
                         const struct node_ident *up)
{
    return prev->run_id[0] == '\0' && up->run_id[0] != '\0';
}
