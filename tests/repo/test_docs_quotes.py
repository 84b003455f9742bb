"""The documentation quotes only what the daemon really says.

    /usr/bin/python3 -m pytest tests/repo/test_docs_quotes.py -q

Users grep their logs, scrapes and dashboards for the strings the docs
quote, so each kind of quote is checked against the sources of sidecar/
(never the build directory):

- metric names `redlockd_...` (and their label names, and `result` values)
  in the docs, the alert rules and the Grafana dashboards against
  sidecar/metrics.h and sidecar/metrics.c; and the reverse: every metric
  the daemon exports is described in README.md or docs/operations.md;
- command-line flags of redlockd against the table of sidecar/config.c;
- error codes against the error table of sidecar/proto_encode.c;
- log lines (and `last_error` texts) against the string literals of
  sidecar/*.c, printf conversions and the docs' placeholders as wildcards.

Each rule that decides what a doc presents as such a quote is stated at the
function that applies it.
"""

import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIDECAR = REPO / "sidecar"

# The documentation, as the files users read.
DOC_GLOBS = ["README.md", "CONTRIBUTING.md", "SECURITY.md", "docs/*.md",
             "proto/README.md", "tests/*/README.md", "clients/*/README.md"]
# Metric names also live in the monitoring config under docker/.
MONITORING_GLOBS = ["docker/**/*.yaml", "docker/**/*.yml",
                    "docker/grafana/**/*.json"]


def doc_files():
    return sorted({p for g in DOC_GLOBS for p in REPO.glob(g)})


def monitoring_files():
    return sorted({p for g in MONITORING_GLOBS for p in REPO.glob(g)})


def rel(path):
    return path.relative_to(REPO).as_posix()


def fail(kind, bad):
    """One assertion listing every quote of this kind the code lacks."""
    assert not bad, "%s quoted in the docs but not in sidecar/:\n  %s" % (
        kind, "\n  ".join(bad))


# ---- Markdown: code spans and code-block lines ---------------------------

def code_pieces(path):
    """(line, text) for each inline code span (spans may run over
    a line break inside a paragraph) and each line of a fenced code block
    (a line ending in a backslash joined with the next)."""
    lines = path.read_text().splitlines()
    out = []
    para, para_start = [], 0
    fence = None
    pending, pending_line = "", 0

    def flush_para():
        text = "\n".join(para)
        for m in re.finditer(r"(`+)(.+?)\1", text, re.S):
            line = para_start + text.count("\n", 0, m.start())
            out.append((line, m.group(2).strip()))

    for n, ln in enumerate(lines, 1):
        if fence is not None:
            if ln.strip().startswith(fence):
                fence = None
                continue
            if ln.rstrip().endswith("\\"):
                pending += ln.rstrip()[:-1] + " "
                pending_line = pending_line or n
                continue
            out.append((pending_line or n, pending + ln))
            pending, pending_line = "", 0
            continue
        m = re.match(r"\s*(```+|~~~+)", ln)
        if m:
            if para:
                flush_para()
                para = []
            fence = m.group(1)
            continue
        if ln.strip():
            if not para:
                para_start = n
            para.append(ln)
        elif para:
            flush_para()
            para = []
    if para:
        flush_para()
    return out


def sentences(path):
    """(line, text) for each sentence of a Markdown file's prose, code
    spans kept in it; a list item or table row starts a new one."""
    out = []
    lines = path.read_text().splitlines()
    block, start, fence = [], 0, None
    for n, ln in enumerate(lines + [""], 1):
        if fence is not None:
            if ln.strip().startswith(fence):
                fence = None
            continue
        m = re.match(r"\s*(```+|~~~+)", ln)
        starts_item = re.match(r"\s*(?:[-*|]|\d+\.)\s", ln)
        if m or not ln.strip() or starts_item:
            if block:
                out.extend(split_sentences(start, "\n".join(block)))
            block = []
            if m:
                fence = m.group(1)
                continue
            if not ln.strip():
                continue
        if not block:
            start = n
        block.append(ln)
    return out


def split_sentences(start, text):
    # A full stop ends a sentence unless it is inside a code span.
    out, cur, line = [], [], start
    for m in re.finditer(r"`+.*?`+|\.(?=\s)|[^`.]+|[`.]", text, re.S):
        cur.append(m.group(0))
        if m.group(0) == ".":
            s = "".join(cur)
            out.append((line, s))
            line += s.count("\n")
            cur = []
    if cur:
        out.append((line, "".join(cur)))
    return out


# ---- What the sources say -------------------------------------------------

def c_source(path):
    """The text of a C file without its comments (strings kept)."""
    text = path.read_text().replace("\\\n", " \n")  # macro lines
    token = (r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''  # literals
             r"|/\*.*?\*/|//[^\n]*")  # comments
    return re.sub(token, lambda m: m.group(0) if m.group(0)[0] in "\"'"
                  else " ", text, flags=re.S)


def unescape(s):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(
        m.group(1), m.group(1)), s)


@functools.lru_cache(None)
def c_strings():
    """Every string literal of sidecar/*.c, adjacent ones joined (a message
    split over lines is one literal), with its file:line."""
    out = []
    for path in sorted(SIDECAR.glob("*.c")):
        text = c_source(path)
        for m in re.finditer(r'"(?:\\.|[^"\\\n])*"(?:\s*"(?:\\.|[^"\\\n])*")*',
                             text):
            parts = re.findall(r'"((?:\\.|[^"\\\n])*)"', m.group(0))
            out.append(("%s:%d" % (rel(path), text.count("\n", 0, m.start())
                                   + 1), unescape("".join(parts))))
    return out


@functools.lru_cache(None)
def daemon_metrics():
    """{name: {label: set of values or None}} as metrics_render() writes
    them: the X-macro lists of metrics.h and the series metrics.c writes
    by hand (a name{label=...} literal, a node_series[] row or a
    render_hist call)."""
    h = c_source(SIDECAR / "metrics.h")
    c = c_source(SIDECAR / "metrics.c")
    metrics = {}
    s = r'"([^"]*)"'
    help_ = r'(?:"[^"]*"\s*)+'  # adjacent literals
    counters = re.findall(r"X\(\s*\w+,\s*%s,\s*%s,\s*(?:%s|NULL),\s*"
                          r"(?:%s|NULL)\)" % (s, help_, s, s), h)
    gauges = re.findall(r"X\(\s*\w+,\s*%s,\s*%s\)" % (s, help_), h)
    assert len(counters) + len(gauges) == len(re.findall(r"\bX\(", h)), \
        "sidecar/metrics.h: a row of the X-macro lists was not understood"
    for name, label, value in counters:
        labels = metrics.setdefault(name, {})
        if label:
            labels.setdefault(label, set()).add(value)
    for name in gauges:
        metrics.setdefault(name, {})
    for m in re.finditer(r'"(redlockd_\w+)\{(\w+)=', c):
        metrics.setdefault(m.group(1), {}).setdefault(m.group(2), None)
    # metrics.c's node_series[] table: one series per node, label "node".
    table = c.split("node_series[] = {", 1)[1].split("\n};", 1)[0]
    rows = re.findall(r'\{"(redlockd_\w+)",\s*"(?:gauge|counter)",', table)
    assert rows and len(rows) == table.count('{"'), \
        "sidecar/metrics.c: a row of node_series[] was not understood"
    for name in rows:
        metrics.setdefault(name, {}).setdefault("node", None)
    for m in re.finditer(r'render_hist\(\s*&o,\s*"(redlockd_\w+)",(.*?)\);',
                         c, re.S):
        args = re.sub(r'"\s+"', "", m.group(2))  # joined help text
        label = re.search(r'&\w+(?:\[\w+\])?,\s*(?:"(\w+)"|NULL)', args)
        labels = {label.group(1): None} if label and label.group(1) else {}
        for suffix in ("", "_sum", "_count"):
            metrics.setdefault(m.group(1) + suffix, {}).update(labels)
        metrics.setdefault(m.group(1) + "_bucket", {"le": None}).update(
            labels)
    return metrics


@functools.lru_cache(None)
def daemon_flags():
    """The long flags of sidecar/config.c's options[] table."""
    text = c_source(SIDECAR / "config.c")
    table = text.split("options[] = {", 1)[1].split("\n};", 1)[0]
    flags = {"--" + m for m in re.findall(r'^\s*\{"([a-z0-9-]+)",', table,
                                          re.M)}
    assert len(flags) == table.count("{\""), \
        "sidecar/config.c: a row of options[] was not understood"
    return flags


@functools.lru_cache(None)
def daemon_error_codes():
    """The wire codes of sidecar/proto_encode.c's err_table (ERR_NONE's "ok" is
    no error)."""
    text = c_source(SIDECAR / "proto_encode.c")
    table = text.split("err_table[ERR__COUNT] = {", 1)[1].split("};", 1)[0]
    return set(re.findall(r'\[ERR_(?!NONE\])\w+\]\s*=\s*\{"(\w+)"', table))


# ---- Metrics --------------------------------------------------------------

# Labels Prometheus adds to every series at scrape time.
SCRAPE_LABELS = {"instance", "job"}
# redlockd_... names that are not metrics: tests/fault's nft table.
NOT_METRICS = {"redlockd_fault"}

METRIC = re.compile(r"\b(redlockd_[a-z][a-z0-9_]*[a-z0-9])(\{[^}]*\})?")
METRIC_NAME = re.compile(r"\b(redlockd_[a-z][a-z0-9_]*[a-z0-9])\b")


def metric_quotes():
    """(file:line, name, labels text) of every redlockd_... anywhere in the
    docs and the monitoring config (the Grafana JSON escapes its quotes)."""
    for path in doc_files() + monitoring_files():
        for n, ln in enumerate(path.read_text().splitlines(), 1):
            for m in METRIC.finditer(ln.replace('\\"', '"')):
                if m.group(1) not in NOT_METRICS:
                    yield "%s:%d" % (rel(path), n), m.group(1), m.group(2)


def test_quoted_metrics_exist():
    metrics = daemon_metrics()
    bad = []
    for where, name, labels in metric_quotes():
        if name not in metrics:
            bad.append("%s: %s (no such metric)" % (where, name))
            continue
        # {node}, {result="ok"}, {instance=~"$instance"}, {version="…"}
        for lm in re.finditer(r'(\w+)\s*(?:(=~|!~|!=|=)\s*"([^"]*)")?',
                              (labels or "{}")[1:-1]):
            label, op, value = lm.groups()
            if label in SCRAPE_LABELS:
                continue
            if label not in metrics[name]:
                bad.append("%s: %s has no label %s" % (where, name, label))
            elif op == "=" and metrics[name][label] is not None \
                    and value not in metrics[name][label]:
                bad.append('%s: %s{%s="%s"} is never written (only %s)' % (
                    where, name, label, value,
                    ", ".join(sorted(metrics[name][label]))))
    fail("metrics", bad)


def test_every_metric_is_documented():
    """The reverse: what /metrics exports is described for its readers."""
    text = "\n".join((REPO / f).read_text()
                     for f in ("README.md", "docs/operations.md"))
    documented = set(METRIC_NAME.findall(text))
    missing = [n for n in sorted(daemon_metrics())
               if not re.search(r"_(bucket|sum|count)$", n)
               and n not in documented]
    assert not missing, (
        "metrics the daemon exports that README.md and docs/operations.md "
        "do not describe:\n  " + "\n  ".join(missing))


# ---- Flags ----------------------------------------------------------------

# Flags quoted with no command in front of them (`--wait MS` in prose, a
# table cell) are taken as redlockd's, except these, which the docs quote
# bare for the other tool they describe. Each is that tool's, not the
# daemon's: the daemon has no flag of the same name.
OTHER_TOOLS_FLAGS = {
    # redlockctl (clients/shell/README.md)
    "--ttl": "redlockctl", "--wait": "redlockctl", "--fence": "redlockctl",
    "--permits": "redlockctl", "--kill-after": "redlockctl",
    "--keep": "redlockctl", "--quiet": "redlockctl",
    "--timeout": "redlockctl",
    # tests/bench/run.sh and rlbench (tests/bench/README.md)
    "--quick": "run.sh, scripts/test", "--unix": "run.sh",
    "--tls": "run.sh", "--pin": "run.sh", "--no-build": "run.sh",
    "--no-node": "run.sh", "--serve": "rlbench", "--inproc": "rlbench",
    "--limit": "rlbench", "--serve-max-s": "rlbench", "--drain": "rlbench",
    "--redis": "rlbench", "--no-redis-stats": "rlbench",
    "--node-ap": "node_redlock_bench.mjs", "--buildtype": "meson",
    # tests/fault: nemesis.py and faultproxy
    "--long": "nemesis.py", "--seed": "nemesis.py, faultproxy",
    "--listen": "faultproxy", "--target": "faultproxy",
    "--stdin": "faultproxy",
    # redis-server, as the test suites start it
    "--save": "redis-server", "--appendonly": "redis-server",
    "--appendfsync": "redis-server", "--tls-port": "redis-server",
    "--tls-ca-cert-file": "redis-server",
    "--tls-auth-clients": "redis-server", "--port": "redis-server",
    "--bind": "redis-server",
    # podman (tests/container/README.md), curl (clients/shell/README.md)
    "--network": "podman", "--max-time": "curl",
}

# A flag, or a family of them (`--tls-*`).
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*(?:-\*)?)")
DAEMON = re.compile(r"^(?:\S*/)?redlockd$")
# Commands that prose (a comment) names before their flags.
TOOLS = {"redlockctl", "curl", "socat", "docker", "kubectl", "podman",
         "redis-server", "redis-cli", "promtool", "pytest", "meson", "ninja",
         "node", "npm", "go", "rlbench", "faultproxy"}
# Words before a command that are not the command.
NOT_COMMANDS = {"sudo", "exec", "env", "time", "do", "then", "if", "while",
                "until", "!", "...", "…"}


def flag_owners(text, owner=None, prose=False):
    """(flag, owner) for each flag in one code span or code line.

    The owner is the command the flag follows: `redlockd` (or a path to
    it) wherever it stands, else the first word of the command (after `|`,
    `;`, `&&`, `$(`, `<(`, env assignments, `sudo`, `exec`...). In prose (a `#`
    comment) only `redlockd`, a tool of TOOLS or a path to a script names
    an owner. None means no command: a bare flag. Returns the pairs and
    the owner at the end of the text."""
    out, at_start = [], not prose
    text = re.sub(r"(\|\||&&|[;|&]|[$<]\(|(?<!\S)#)", r" \1 ", text)
    for tok in text.split():
        if tok in ("|", "||", "&&", ";", "&", "$(", "<("):
            owner, at_start = None, not prose
            continue
        if tok == "#":
            owner, at_start, prose = None, False, True
            continue
        word = tok.strip("()[]{}\"'`,;:.")
        if DAEMON.match(word):
            owner, at_start = "redlockd", False
            continue
        flags = FLAG.findall(word) if word.startswith("--") else []
        if flags:
            out.extend((f, owner) for f in flags)  # --allow-uid/--allow-gid
            at_start = False
        elif prose:
            if word in TOOLS or re.match(r"[\w.]*/[\w./-]+$", word):
                owner = word
        elif at_start and word and not re.match(r"\w+=", word) \
                and word not in NOT_COMMANDS:
            owner, at_start = word, False
    return out, owner


def flag_quotes():
    """(file:line, flag, owner) of each flag in the docs' code spans and
    code blocks, and in docker/'s YAML: its comments (prose, a command
    continued with a backslash keeps its owner) and REDLOCKD_EXTRA_ARGS."""
    for path in doc_files():
        for line, text in code_pieces(path):
            for flag, owner in flag_owners(text)[0]:
                yield "%s:%d" % (rel(path), line), flag, owner
    for path in sorted(REPO.glob("docker/**/*.y*ml")):
        owner = None
        for n, ln in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*#(.*)", ln)
            args = re.search(r"REDLOCKD_EXTRA_ARGS:\s*\"(.*)\"", ln)
            found = []
            if m:
                found, end = flag_owners(m.group(1), owner, prose=True)
                owner = end if m.group(1).rstrip().endswith("\\") else None
            elif args:
                found = flag_owners(args.group(1), None, prose=True)[0]
            for flag, o in found:
                yield "%s:%d" % (rel(path), n), flag, o


def test_quoted_flags_exist():
    flags = daemon_flags()
    bad = []
    for where, flag, owner in flag_quotes():
        if owner == "redlockd" or (owner is None
                                   and flag not in OTHER_TOOLS_FLAGS):
            if flag not in flags and not (flag.endswith("-*") and any(
                    f.startswith(flag[:-1]) for f in flags)):
                bad.append("%s: %s%s" % (where, flag, "" if owner else
                                         " (a bare flag: redlockd's?)"))
    fail("redlockd flags", bad)


def test_every_flag_is_in_the_readme_table():
    """The reverse: docs/operations.md sends operators to the README for
    "every flag", so each row of options[] has a row of its own in the
    README's table of flags (a row's first cell, `--flag ...`)."""
    rows = set()
    for ln in (REPO / "README.md").read_text().splitlines():
        if ln.startswith("| `--"):
            rows.update(FLAG.findall(ln.split("|")[1]))
    fail("README flag table rows", sorted(
        "%s (in sidecar/config.c, no README row)" % f
        for f in daemon_flags() - rows - {"--help", "--version"}))


def test_other_tools_flags_are_not_the_daemons():
    # An entry of the allow-list that the daemon has would hide a stale
    # quote of the daemon's own flag.
    assert not set(OTHER_TOOLS_FLAGS) & daemon_flags()


# ---- Error codes ----------------------------------------------------------

def error_code_quotes():
    """(file:line, code) of each quote the docs present as an error code:
    - a code span in the first column of a Markdown table whose header's
      first cell is `code` (the error tables);
    - `"code":"..."` in a code span or block (the error shape);
    - a code span right after answer/answers/answered/answering, "refused
      with", "fails with", or an HTTP status (`429 `limit``)."""
    for path in doc_files():
        lines = path.read_text().splitlines()
        in_table = False
        for n, ln in enumerate(lines, 1):
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if ln.lstrip().startswith("|"):
                if re.fullmatch(r"code", cells[0], re.I):
                    in_table = True
                elif in_table and cells[0].startswith("`"):
                    yield "%s:%d" % (rel(path), n), cells[0].strip("`")
            else:
                in_table = False
        for line, text in code_pieces(path):
            for m in re.finditer(r'"code"\s*:\s*"([^"]*)"', text):
                yield "%s:%d" % (rel(path), line), m.group(1)
        for line, text in sentences(path):
            for m in re.finditer(r"(?:\banswer(?:s|ed|ing)?|\brefused with"
                                 r"|\bfails? with|\b[1-5]\d\d)\s+"
                                 r"`([a-z][a-z_]*)`", text):
                yield "%s:%d" % (rel(path), line + text.count(
                    "\n", 0, m.start())), m.group(1)


def test_quoted_error_codes_exist():
    codes = daemon_error_codes()
    bad = ["%s: %s" % (w, c) for w, c in error_code_quotes()
           if c not in codes]
    fail("error codes", bad)


# ---- Log lines ------------------------------------------------------------

# Text a daemon message carries from a library, not from sidecar/: OpenSSL's
# verify and alert strings, getaddrinfo's gai_strerror().
LIBRARY_TEXT = [
    "certificate has expired", "hostname mismatch",
    "unable to get local issuer certificate",
    "tlsv13 alert certificate required", "Name or service not known",
]

# What the docs say before they quote the daemon's words.
LOG_CUE = re.compile(r"\blog line\b|\blogs? an? (?:error|warning)\b|"
                     r"\bwarning\b|\bwarns\b|\bin the log\b|`last_error`")


def log_quotes():
    """(file:line, quote) of each log line the docs quote: a code span of
    at least two words, not all upper case (a Redis command), not a path,
    an HTTP request or a flag, in the same sentence as, and after, a cue
    (LOG_CUE: "log line", "logs an error", "warning", "in the log",
    `last_error`)."""
    for path in doc_files():
        for line, text in sentences(path):
            cue = LOG_CUE.search(text)
            if not cue:
                continue
            for m in re.finditer(r"`([^`]+)`", text):
                if m.start() < cue.end():
                    continue
                q = re.sub(r"\s+", " ", m.group(1)).strip()
                if " " in q and re.search(r"[a-z]", q) \
                        and not q.startswith(("/", "GET ", "--")):
                    yield "%s:%d" % (rel(path), line + text.count(
                        "\n", 0, m.start())), q


WILD = object()


def doc_tokens(quote):
    """The quote as tokens: characters, WILD for a placeholder (N, an
    upper-case word such as HOST, <...>, ..., …, a library's text), or
    ("UPPER", word) for an upper-case word, which may also be literal
    (TLS, NOSCRIPT)."""
    toks = []
    lib = "|".join(re.escape(t) for t in LIBRARY_TEXT)
    for m in re.finditer(r"(%s)|(<[^>]*>|\.\.\.|…)|\b([A-Z][A-Z0-9_]*)\b|(.)"
                         % lib, quote, re.S):
        if m.group(1) or m.group(2):
            toks.append(WILD)
        elif m.group(3):
            toks.append(("UPPER", m.group(3)))
        else:
            toks.append(m.group(4))
    return toks


CONV = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t)?[diuxXsgfcp]")


def fmt_tokens(fmt):
    """A format string as tokens: characters, and ("CONV", c) for a printf
    conversion."""
    toks, pos = [], 0
    for m in re.finditer(r"%%|" + CONV.pattern, fmt):
        toks.extend(fmt[pos:m.start()])
        toks.append("%" if m.group(0) == "%%" else ("CONV", m.group(0)[-1]))
        pos = m.end()
    toks.extend(fmt[pos:])
    return toks


@functools.lru_cache(None)
def literals():
    """Whole string literals of sidecar/ that a %s may carry ("TLS
    handshake", "timed out")."""
    return frozenset(s for _, s in c_strings() if 2 <= len(s) <= 40
                     and "%" not in s)


def matches(doc, fmt):
    """Whether the quote doc can be part of a line printed with fmt: its
    characters match fmt's, a placeholder of doc matches anything, and a
    conversion of fmt matches a placeholder, a number (%d...) or a whole
    string literal of sidecar/ (%s)."""
    n, m = len(doc), len(fmt)
    lits = literals()
    # seg[i]: the ends j of doc[i:j] that a %s may stand for.
    seg = {}
    plain = ["" if t is WILD else (t[1] if isinstance(t, tuple) else t)
             for t in doc]
    for i in range(n):
        ends = set()
        s = ""
        for j in range(i, min(n, i + 40)):
            if doc[j] is WILD:
                break
            s += plain[j]
            if s in lits or (s.isdigit()):
                ends.add(j + 1)
        seg[i] = ends

    def steps(i, j):
        d = doc[i]
        f = fmt[j] if j < m else None
        if d is WILD or isinstance(d, tuple):  # a placeholder eats fmt
            yield i + 1, j
            if f is not None:
                yield i, j + 1
        if isinstance(d, tuple):  # an upper-case word may be literal
            w = d[1]
            if fmt[j:j + len(w)] == list(w):
                yield i + 1, j + len(w)
        if isinstance(f, tuple):
            yield i, j + 1  # an empty %s
            for e in seg[i]:
                yield e, j + 1
            if f[1] in "diuxXg" and isinstance(d, str) and d.isdigit():
                yield i + 1, j + 1
                yield i + 1, j
        elif f is not None and d == f:
            yield i + 1, j + 1

    # The quote may start anywhere in the line and end before its end.
    todo = [(0, j) for j in range(m + 1)]
    seen = set(todo)
    while todo:
        i, j = todo.pop()
        if i == n:
            return True
        for s in steps(i, j):
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return False


def test_quoted_log_lines_exist():
    fmts = [(s, fmt_tokens(s)) for _, s in c_strings()]
    bad = []
    for where, quote in log_quotes():
        doc = doc_tokens(quote)
        words = [w for w in re.findall(r"[a-z]{4,}", quote)
                 if not any(w in t for t in LIBRARY_TEXT)]
        found = False
        for s, fmt in fmts:
            if words and not any(w in s for w in words):
                continue  # quick filter: none of its plain words
            if matches(doc, fmt):
                found = True
                break
        if not found:
            bad.append("%s: %s" % (where, quote))
    fail("log lines", bad)
