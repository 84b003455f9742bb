"""tests/container/engine.py: podman for the container suite.

Builds the images on the local debootstrapped base (host-setup.sh), runs
containers with the runc runtime, and always removes what it started.
Every container gets --network=host (loopback ports chosen free) or
--network=none (unix sockets in shared volumes): run() refuses anything
else, so no test can make or join a bridge network.
"""

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "harness"))

import rl  # noqa: E402  (the harness every Python suite shares)

BASE_IMAGE = "localhost/debian:bookworm-slim"
IMAGE = "localhost/redlockd:container-test"
BOT_IMAGE = "localhost/redlockd-example-bot:container-test"
REDIS_IMAGE = "localhost/redlockd-test-redis:7"
PODMAN = ["podman", "--runtime", "runc"]
BUILD_BOUND_S = 900
RUN_BOUND_S = 60

_started = []


def sh(argv, bound=RUN_BOUND_S, check=True, **kw):
    """Run argv to the end; a CompletedProcess with text output."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=bound,
                       **kw)
    if check and p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(argv[:6]),
                                                   p.returncode, p.stdout,
                                                   p.stderr))
    return p


def why_no_engine():
    """None when containers can run here, else the reason (a sentence)."""
    for tool, pkg in (("podman", "podman"), ("runc", "runc"),
                      ("debootstrap", "debootstrap")):
        if shutil.which(tool) is None and not Path("/usr/sbin/" +
                                                   tool).exists():
            return "%s is not installed (apt-get install %s)" % (tool, pkg)
    if os.geteuid() != 0:
        return "the container suite runs rootful podman: run it as root"
    setup = sh(["bash", str(HERE / "host-setup.sh")], bound=900, check=False)
    if setup.returncode != 0:
        return "tests/container/host-setup.sh failed:\n" + setup.stderr
    probe = sh(PODMAN + ["run", "--rm", "--network=none", BASE_IMAGE,
                         "true"], check=False)
    if probe.returncode != 0:
        return ("podman cannot run a container on this machine: %s"
                % (probe.stderr.strip() or probe.stdout.strip()))
    return None


def build(dockerfile, tag, bound=BUILD_BOUND_S, args=(), context=REPO):
    """podman build (context: the top of the repository); layers are
    cached, so an unchanged step is not run again."""
    argv = ["podman", "build", "--isolation=chroot", "--network=host",
            "--format=docker", "--layers", "-f", str(dockerfile),
            "--build-arg", "DEBIAN_IMAGE=" + BASE_IMAGE, "-t", tag]
    for a in args:
        argv += ["--build-arg", a]
    sh(argv + [str(context)], bound=bound)
    return tag


free_port = rl.free_tcp_port


def name(prefix):
    return "rltest-%s-%s" % (prefix, uuid.uuid4().hex[:8])


def run(image, args=(), network="none", detach=True, name_prefix="c",
        opts=(), bound=RUN_BOUND_S):
    """podman run; detached: the container's name, else CompletedProcess."""
    if network not in ("host", "none"):
        raise ValueError("tests use --network=host or none, never %r"
                         % network)
    cname = name(name_prefix)
    argv = PODMAN + ["run", "--name", cname, "--network=" + network]
    argv += ["-d"] if detach else ["--rm"]
    argv += list(opts) + [image] + list(args)
    _started.append(cname)
    if detach:
        sh(argv, bound=bound)
        return cname
    return sh(argv, bound=bound, check=False)


def inspect(cname, fmt):
    return sh(["podman", "inspect", "--format", fmt, cname]).stdout.strip()


def logs(cname):
    p = sh(["podman", "logs", cname], check=False)
    return p.stdout + p.stderr


def remove(cname):
    sh(["podman", "rm", "-f", "-t", "2", cname], check=False, bound=60)


def remove_all():
    while _started:
        remove(_started.pop())


def wait_until(pred, bound, what, step=0.1):
    return rl.wait_for(pred, bound, what, step,
                       (OSError, ValueError, RuntimeError, rl.Closed))
