/* scripts.c: the Lua scripts, as Redis runs them. Every script touches
 * only the keys it is given in KEYS, all under the daemon's prefix: no key
 * comes from ARGV or from a reply inside the script, so a server that
 * refuses undeclared keys (Dragonfly) runs them as they are
 * (tests/repo/test_script_keys.py checks the sources). Each is atomic
 * on its node, which is what makes check-and-set safe without WATCH. The
 * reply shapes are in scripts.h. */
#include "scripts.h"

/* The frame of the one-kind batch scripts: each key K[i] is compared with
 * its token A[i]; a key that is not ours answers 0 (or the error its GET
 * met, for that key alone), and the action between the two runs only on a
 * key that is. type() runs only off the path where the key was ours. */
#define BATCH_EACH_KEY_OF_TOKEN                                                \
    "local pcall, K, A = redis.pcall, KEYS, ARGV\n"                            \
    "local n = #K\n"                                                           \
    "local r = {}\n"                                                           \
    "for i = 1, n do\n"                                                        \
    "  local v = pcall('GET', K[i])\n"                                         \
    "  if v ~= A[i] then\n"                                                    \
    "    if type(v) == 'table' then r[i] = v.err else r[i] = 0 end\n"          \
    "  else\n"
#define BATCH_END                                                              \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "return r\n"

const char *const script_source[SCRIPT__COUNT] = {
    [SCRIPT_ACQUIRE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if v then\n"
        "  local t = redis.call('PTTL', KEYS[1])\n"
        "  if string.sub(v, 1, 5) == 'done:' then return {2, t} end\n"
        "  return {0, t}\n"
        "end\n"
        "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
        "if ARGV[3] == '1' then\n"
        "  return {1, redis.call('INCR', KEYS[2])}\n"
        "end\n"
        "return {1, 0}\n",
    [SCRIPT_RELEASE] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
        "  redis.call('DEL', KEYS[1])\n"
        "  if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], 'r') end\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
    [SCRIPT_EXTEND] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                      "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                      "end\n"
                      "return 0\n",
    [SCRIPT_COMPLETE] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
        "  redis.call('SET', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[2])\n"
        "  if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], 'd') end\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
    [SCRIPT_FENCE_RAISE] =
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
        "  local c = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
        "  local t = tonumber(ARGV[2])\n"
        "  if c < t then redis.call('SET', KEYS[2], ARGV[2]) end\n"
        "  return 1\n"
        "end\n"
        "return 0\n",
    [SCRIPT_FENCE_REPAIR] =
        "local c = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
        "local t = tonumber(ARGV[1])\n"
        "if c < t then redis.call('SET', KEYS[1], ARGV[1]) return t end\n"
        "return c\n",
    /* redis.pcall: an error on one key (a key of another type) is that
     * key's answer, as its text, and the loop goes on. */
    [SCRIPT_BATCH] =
        "local r = {}\n"
        "for i = 1, #KEYS do\n"
        "  local a = 4 * (i - 1)\n"
        "  local op, t, n, ch = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],\n"
        "                       ARGV[a + 4]\n"
        "  local v = redis.pcall('GET', KEYS[i])\n"
        "  if type(v) == 'table' then\n"
        "    r[i] = v.err\n"
        "  elseif v ~= t then\n"
        "    r[i] = 0\n"
        "  else\n"
        "    local e\n"
        "    if op == 'r' then\n"
        "      e = redis.pcall('DEL', KEYS[i])\n"
        "    elseif op == 'e' then\n"
        "      e = redis.pcall('PEXPIRE', KEYS[i], n)\n"
        "    else\n"
        "      e = redis.pcall('SET', KEYS[i], 'done:' .. t, 'PX', n)\n"
        "    end\n"
        "    if type(e) == 'table' and e.err then\n"
        "      r[i] = e.err\n"
        "    elseif op == 'e' then\n"
        "      r[i] = e\n"
        "    else\n"
        "      if ch ~= '' then\n"
        "        redis.pcall('PUBLISH', ch, op == 'r' and 'r' or 'd')\n"
        "      end\n"
        "      r[i] = 1\n"
        "    end\n"
        "  end\n"
        "end\n"
        "return r\n",
    /* The two common batches alone, lighter for Redis than SCRIPT_BATCH:
     * fewer arguments to parse per key, and no action to branch on. */
    /* clang-format off */
    [SCRIPT_BATCH_RELEASE] =
        BATCH_EACH_KEY_OF_TOKEN
        "    local e = pcall('DEL', K[i])\n"
        "    if e ~= 1 and type(e) == 'table' then\n"
        "      r[i] = e.err\n"
        "    else\n"
        "      local ch = A[n + i]\n"
        "      if ch and ch ~= '' then pcall('PUBLISH', ch, 'r') end\n"
        "      r[i] = 1\n"
        "    end\n"
        BATCH_END,
    [SCRIPT_BATCH_EXTEND] =
        BATCH_EACH_KEY_OF_TOKEN
        "    local e = pcall('PEXPIRE', K[i], A[n + i])\n"
        "    if e ~= 1 and type(e) == 'table' then r[i] = e.err\n"
        "    else r[i] = e end\n"
        BATCH_END,
    /* clang-format on */
    /* The done marks among a page of keys that SCAN answered, with their
     * PTTLs: keys first, then a mark and a PTTL per key, so that the answer
     * is DONE_COPY's arguments as they stand. A key of another type is no
     * mark (redis.pcall). */
    [SCRIPT_DONE_READ] =
        "local ks, ms = {}, {}\n"
        "for i = 1, #KEYS do\n"
        "  local k = KEYS[i]\n"
        "  local v = redis.pcall('GET', k)\n"
        "  if type(v) == 'string' and string.sub(v, 1, 5) == 'done:' then\n"
        "    local t = redis.call('PTTL', k)\n"
        "    if t > 0 then\n"
        "      ks[#ks + 1] = k\n"
        "      ms[#ms + 1] = v\n"
        "      ms[#ms + 1] = tostring(t)\n"
        "    end\n"
        "  end\n"
        "end\n"
        "local n = #ks\n"
        "for i = 1, #ms do ks[n + i] = ms[i] end\n"
        "return ks\n",
    [SCRIPT_DONE_COPY] =
        "local n = 0\n"
        "for i = 1, #KEYS do\n"
        "  local k = KEYS[i]\n"
        "  local v, t = ARGV[2 * i - 1], tonumber(ARGV[2 * i])\n"
        "  local cur = redis.pcall('GET', k)\n"
        "  if cur == false then\n"
        "    redis.call('SET', k, v, 'PX', t)\n"
        "    n = n + 1\n"
        "  elseif cur == v and redis.call('PTTL', k) < t then\n"
        "    redis.call('PEXPIRE', k, t)\n"
        "  end\n"
        "end\n"
        "return n\n",
};

const int script_numkeys[SCRIPT__COUNT] = {
    [SCRIPT_ACQUIRE] = 2,      [SCRIPT_RELEASE] = 1,
    [SCRIPT_EXTEND] = 1,       [SCRIPT_COMPLETE] = 1,
    [SCRIPT_FENCE_RAISE] = 2,  [SCRIPT_FENCE_REPAIR] = 1,
    [SCRIPT_DONE_READ] = 0,    [SCRIPT_DONE_COPY] = 0,
    [SCRIPT_BATCH] = 0,        [SCRIPT_BATCH_RELEASE] = 0,
    [SCRIPT_BATCH_EXTEND] = 0,
};
