"""tlsutil.py: certificates made with the openssl CLI in a temp dir, and
redis-server nodes that speak TLS on 127.0.0.1 (plain TCP off).

Certs(dir) makes, all with P-256 keys (fast to generate):
  ca        the CA the daemon trusts (--tls-ca-file)
  server    signed by ca, for localhost and 127.0.0.1
  wrongname signed by ca, for other.invalid only
  expired   signed by ca, for localhost and 127.0.0.1, expired in 2020
            (openssl 3.0's x509 has no -not_after: `openssl ca` dates it)
  rogue     a second CA, and roguesrv, a server cert it signed for
            localhost and 127.0.0.1
  client    signed by ca, for mutual TLS (its key is mode 0600)

TlsNode keeps the unix socket of rl.RedisNode in plain text (the tests
inspect keys through it; the daemon never uses it) and listens with TLS on
127.0.0.1:tls_port, the port kept across restarts.
"""

import os
import subprocess
from pathlib import Path

from rl import RedisNode, free_tcp_port

OPENSSL = os.environ.get("OPENSSL", "openssl")

_CA_CNF = """\
[ca]
default_ca = ca_default
[ca_default]
dir = {dir}
database = {dir}/index.txt
new_certs_dir = {dir}
serial = {dir}/serial
default_md = sha256
policy = policy_any
copy_extensions = copy
unique_subject = no
[policy_any]
commonName = supplied
"""


def _run(*args, cwd):
    r = subprocess.run([OPENSSL] + list(args), cwd=cwd, capture_output=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (
            " ".join(args), r.stderr.decode(errors="replace")))


class Certs:
    def __init__(self, dir_):
        self.dir = Path(dir_)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._ca("ca")
        self._ca("rogue")
        both = "DNS:localhost,IP:127.0.0.1"
        self._leaf("server", "ca", both)
        self._leaf("wrongname", "ca", "DNS:other.invalid")
        self._leaf("roguesrv", "rogue", both)
        self._leaf("client", "ca", None, client=True)
        self._expired("expired", "ca", both)
        for name in ("client", "server"):
            os.chmod(self.key(name), 0o600)

    def crt(self, name):
        return str(self.dir / ("%s.crt" % name))

    def key(self, name):
        return str(self.dir / ("%s.key" % name))

    def _newkey(self):
        return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes"]

    def _ca(self, name):
        _run("req", "-x509", "-new", *self._newkey(), "-keyout",
             self.key(name), "-out", self.crt(name), "-days", "2", "-subj",
             "/CN=redlockd-test-%s" % name, cwd=self.dir)

    def _csr(self, name, san, client):
        ext = self.dir / ("%s.ext" % name)
        lines = ["basicConstraints=CA:FALSE"]
        if san:
            lines.append("subjectAltName=%s" % san)
        lines.append("extendedKeyUsage=%s" % ("clientAuth" if client
                                               else "serverAuth"))
        ext.write_text("\n".join(lines) + "\n")
        _run("req", "-new", *self._newkey(), "-keyout", self.key(name),
             "-out", str(self.dir / ("%s.csr" % name)), "-subj",
             "/CN=%s" % name, cwd=self.dir)
        return ext

    def _leaf(self, name, ca, san, client=False):
        ext = self._csr(name, san, client)
        _run("x509", "-req", "-in", str(self.dir / ("%s.csr" % name)),
             "-CA", self.crt(ca), "-CAkey", self.key(ca), "-CAcreateserial",
             "-out", self.crt(name), "-days", "2", "-sha256", "-extfile",
             str(ext), cwd=self.dir)

    def _expired(self, name, ca, san):
        ext = self._csr(name, san, False)
        cadir = self.dir / "cadb"
        cadir.mkdir(exist_ok=True)
        (cadir / "index.txt").write_text("")
        (cadir / "serial").write_text("1000\n")
        cnf = cadir / "ca.cnf"
        cnf.write_text(_CA_CNF.format(dir=cadir))
        _run("ca", "-batch", "-config", str(cnf), "-cert", self.crt(ca),
             "-keyfile", self.key(ca), "-in",
             str(self.dir / ("%s.csr" % name)), "-out", self.crt(name),
             "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
             "-extfile", str(ext), "-notext", cwd=self.dir)


class TlsNode(RedisNode):
    """A redis-server with TLS on 127.0.0.1:tls_port and plain TCP off."""

    def __init__(self, dir_, k, certs, cert="server", auth_clients="no"):
        super().__init__(dir_, k)
        self.certs = certs
        self.cert = cert
        self.auth_clients = auth_clients
        self.tls_port = free_tcp_port()
        self.free_port = True  # pick_port() on a race for tls_port

    def tls_uri(self, host="127.0.0.1", userinfo=""):
        return "rediss://%s%s:%d" % (userinfo + "@" if userinfo else "",
                                     host, self.tls_port)

    def pick_port(self):
        """The first start picks another TLS port when the free one was
        taken in the meantime; a restart keeps the port (the daemon's
        URI)."""
        self.tls_port = free_tcp_port()

    def server_args(self):
        c = self.certs
        return ["--bind", "127.0.0.1", "--tls-port", str(self.tls_port),
                "--tls-cert-file", c.crt(self.cert),
                "--tls-key-file", c.key(self.cert),
                "--tls-ca-cert-file", c.crt("ca"),
                "--tls-auth-clients", self.auth_clients]
