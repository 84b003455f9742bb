"""Every Lua script of sidecar/scripts.c names the keys it touches only
through KEYS.

    /usr/bin/python3 -m pytest tests/repo/test_script_keys.py -q

A server with strict script checks (Dragonfly; a cluster's key checks)
refuses a script that touches a key it was not given in KEYS. The check
reads each script's source as the daemon loads it and, for every
redis.call / redis.pcall (or a local bound to one), requires that the key
argument be a KEYS[...] expression, an alias of KEYS indexed, or a local
bound only from those. A command that walks the keyspace (SCAN, KEYS)
hands the script keys it was not given and is refused outright; PUBLISH
names a channel, not a key. It is a pragmatic reading of the Lua the
scripts use, not a Lua parser: a command it does not know fails the test,
to be classed here.
"""

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "bench"))

from script_cost import scripts_from_source  # noqa: E402

# Commands whose first argument is a key.
KEYED = {"GET", "SET", "DEL", "PTTL", "PEXPIRE", "INCR"}
# Commands whose first argument is not a key and that touch no key.
UNKEYED = {"PUBLISH"}
# Commands that answer keys the script was not given.
KEYSPACE = {"SCAN", "KEYS", "RANDOMKEY"}

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ASSIGN = re.compile(r"^\s*(?:local\s+)?(%s(?:\s*,\s*%s)*)\s*=(?!=)\s*(.*)$"
                    % (NAME, NAME))
FOR_IN = re.compile(r"^\s*for\s+(%s(?:\s*,\s*%s)*)\s+in\b" % (NAME, NAME))


def split_top(text):
    """text split at the commas outside parentheses, brackets, braces and
    quotes."""
    out, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    return out


def bindings(src):
    """{name: [expression, ...]}: every value each name is given (a for-in
    name gets "<iterator>": a value no check accepts)."""
    got = {}
    for line in src.splitlines():
        m = FOR_IN.match(line)
        if m:
            for n in split_top(m.group(1)):
                got.setdefault(n, []).append("<iterator>")
            continue
        m = ASSIGN.match(line)
        if not m:
            continue
        names = split_top(m.group(1))
        values = split_top(m.group(2))
        for i, n in enumerate(names):
            got.setdefault(n, []).append(values[i] if i < len(values)
                                         else "nil")
    return got


def key_names(got):
    """The names that stand for KEYS (aliases of the table) and those bound
    only from KEYS[...] or an alias indexed (key locals)."""
    tables = {"KEYS"} | {n for n, vs in got.items()
                         if vs and all(v == "KEYS" for v in vs)}
    indexed = re.compile(r"^(%s)\s*\[[^\]]+\]$"
                         % "|".join(sorted(re.escape(t) for t in tables)))
    keys = {n for n, vs in got.items()
            if vs and all(indexed.match(v) for v in vs)}
    return tables, indexed, keys


def call_names(got):
    """redis.call, redis.pcall and the locals bound only to them."""
    base = {"redis.call", "redis.pcall"}
    return base | {n for n, vs in got.items()
                   if vs and all(v in base for v in vs)}


def undeclared(src):
    """The calls of src that may touch a key not given in KEYS, as
    "CMD arg" strings; empty when every key is declared."""
    got = bindings(src)
    _, indexed, keys = key_names(got)
    callers = call_names(got)
    call = re.compile(r"(?<![\w.])(%s)\s*\(" % "|".join(
        sorted((re.escape(c) for c in callers), key=len, reverse=True)))
    bad = []
    for m in call.finditer(src):
        # the argument list up to the matching parenthesis
        depth, i = 1, m.end()
        while i < len(src) and depth > 0:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        args = split_top(src[m.end():i - 1])
        cmd = args[0].strip("'\"").upper()
        key = args[1] if len(args) > 1 else ""
        if cmd in UNKEYED:
            continue
        if cmd in KEYSPACE:
            bad.append("%s (answers keys not given)" % cmd)
        elif cmd not in KEYED:
            bad.append("%s (a command this check does not know)" % cmd)
        elif not (indexed.match(key) or key in keys):
            bad.append("%s %s" % (cmd, key))
    return bad


def test_every_script_declares_its_keys():
    scripts = scripts_from_source(REPO / "sidecar" / "scripts.c")
    assert len(scripts) >= 11, sorted(scripts)
    bad = {name: undeclared(src) for name, src in scripts.items()}
    bad = {name: calls for name, calls in bad.items() if calls}
    assert not bad, "scripts touching keys not given in KEYS: %r" % bad


def test_the_check_refuses_keys_from_argv_or_replies():
    # a key taken from ARGV, as a copy of marks once did
    assert undeclared("local k = ARGV[1]\nredis.call('GET', k)\n")
    assert undeclared("local k, v = ARGV[1], ARGV[2]\n"
                      "redis.call('SET', k, v)\n")
    # keys from a SCAN inside the script, as a scan of marks once did
    assert undeclared("local r = redis.call('SCAN', ARGV[1])\n"
                      "for _, k in ipairs(r[2]) do\n"
                      "  redis.pcall('GET', k)\nend\n")
    # a local that is a key once and something else later
    assert undeclared("local k = KEYS[1]\nk = ARGV[1]\n"
                      "redis.call('DEL', k)\n")
    # an alias of redis.pcall is still a call
    assert undeclared("local pcall = redis.pcall\npcall('GET', ARGV[1])\n")
    # a command the check does not class
    assert undeclared("redis.call('HGET', KEYS[1], 'f')\n")
    # and what the scripts do is accepted
    assert not undeclared("local pcall, K = redis.pcall, KEYS\n"
                          "for i = 1, #K do pcall('GET', K[i]) end\n")
    assert not undeclared("local k = KEYS[i]\nredis.call('PTTL', k)\n"
                          "redis.call('PUBLISH', ARGV[2], 'r')\n")
