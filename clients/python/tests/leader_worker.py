"""A contender for test_leader.py, run as its own process.

    leader_worker.py SOCK RESOURCE OUT MODE TERMS HOLD_MS TTL_MS

MODE is sync or async.  Leads TERMS times (redlockd.leader.lead), each term
HOLD_MS long (HOLD_MS < 0: lead until killed), and appends one line per
event to OUT, flushed at once: "start <monotonic ns> <fence> <pid>" when a
term begins, "end <monotonic ns> <pid>" just before it resigns.  Clocks:
time.monotonic_ns() is CLOCK_MONOTONIC, one clock for every process.
"""

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

from redlockd import AsyncRedlockClient, RedlockClient, leader  # noqa: E402


def main() -> None:
    sock, resource, out, mode = sys.argv[1:5]
    terms, hold_ms, ttl_ms = (int(a) for a in sys.argv[5:8])
    f = open(out, "a", buffering=1)
    pid = os.getpid()

    def note(line: str) -> None:
        f.write(line + "\n")
        f.flush()

    if mode == "sync":
        with RedlockClient(sock) as c:
            for _ in range(terms):
                with leader.lead(c, resource, ttl_ms) as term:
                    note("start %d %d %d" % (time.monotonic_ns(),
                                             term.fence, pid))
                    if hold_ms < 0:
                        term.lost.wait()
                    else:
                        term.lost.wait(hold_ms / 1000.0)
                    note("end %d %d" % (time.monotonic_ns(), pid))
        return

    async def run() -> None:
        async with AsyncRedlockClient(sock) as c:
            for _ in range(terms):
                async with leader.lead(c, resource, ttl_ms) as term:
                    note("start %d %d %d" % (time.monotonic_ns(),
                                             term.fence, pid))
                    await asyncio.sleep(3600 if hold_ms < 0
                                        else hold_ms / 1000.0)
                    note("end %d %d" % (time.monotonic_ns(), pid))
    asyncio.run(run())


if __name__ == "__main__":
    main()
