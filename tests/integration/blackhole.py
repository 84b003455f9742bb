"""blackhole.py: a loopback TCP peer that never completes a connect, for
the tests of connect deadlines (test_wake.py, test_resolve.py), and a reader
of the kernel's /proc/net/tcp that shows the state of each socket to a port.

Standard library only; loopback only."""

import socket
import time

TCP_SYN_SENT = 0x02
TCP_ESTABLISHED = 0x01


def tcp_sockets(port):
    """{local port: (state, timer)} of IPv4 sockets whose peer is
    127.0.0.1:port."""
    out = {}
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, remote, state, timer = fields[1], fields[2], fields[3], \
                fields[5]
            rhost, rport = remote.split(":")
            if rhost != "0100007F" or int(rport, 16) != port:
                continue
            out[int(local.split(":")[1], 16)] = (int(state, 16),
                                                 int(timer.split(":")[0], 16))
    return out


class BlackHole:
    """A TCP listener on 127.0.0.1 whose accept queue is full and never
    drained: the kernel drops every further SYN, so a connect to it hangs
    for the kernel's SYN retries (about two minutes), as to a host that is
    gone. Loopback only."""

    def __init__(self):
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(0)
        self.port = self.lsock.getsockname()[1]
        self.fillers = []
        hung = False
        for _ in range(8):  # backlog 0 queues one; the next one hangs
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(s)
            time.sleep(0.05)
            if tcp_sockets(self.port).get(s.getsockname()[1],
                                           (0,))[0] == TCP_SYN_SENT:
                hung = True
                break
        assert hung, "could not fill the listener's accept queue"

    def own_ports(self):
        return {s.getsockname()[1] for s in self.fillers}

    def close(self):
        for s in self.fillers + [self.lsock]:
            s.close()
