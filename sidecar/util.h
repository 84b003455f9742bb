/* util.h: the daemon's one clock for validity and deadlines.
 *
 * CLOCK_BOOTTIME, not CLOCK_MONOTONIC: both are immune to wall-clock
 * steps, but CLOCK_MONOTONIC stops while the machine is suspended (a
 * laptop lid, a VM paused or live-migrated with its clock frozen) and the
 * keys in Redis keep expiring meanwhile. A lock's validity measured on a
 * clock that stood still would outlast the key. CLOCK_BOOTTIME keeps
 * counting through a suspend; where it does not exist, CLOCK_MONOTONIC. */
#ifndef REDLOCKD_UTIL_H
#define REDLOCKD_UTIL_H

#include <stdint.h>

/* util_now_us: microseconds on that clock (since boot); never decreases. */
uint64_t util_now_us(void);

#endif
