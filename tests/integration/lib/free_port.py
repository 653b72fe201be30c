#!/usr/bin/env python3
"""free_port.py [N] - prints N (default 1) distinct TCP ports free on 127.0.0.1 now, for servers a
test starts next.

Not bind(0)'s ports: those come from the kernel's ephemeral range, which every outgoing connection of
the tests running alongside draws from, so one of them could take the port before our server binds
it. A random port below that range (above it where the range starts low) is never handed to a
connect(). The same rule as cli/local_pg.c's local_free_port, which picks the ports of `whet up`'s
children."""
import random
import socket
import sys

try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
except (OSError, ValueError):
    low, high = 32768, 60999
first, end = 20000, low
if end - first < 1000:
    first, end = high + 1, 65536

count = int(sys.argv[1]) if len(sys.argv) > 1 else 1
held = []  # bound until all are found, so that the N are distinct
for _ in range(64 * count):
    if len(held) == count:
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(first, end)))
        held.append(s)
    except OSError:
        s.close()
if len(held) < count:
    raise SystemExit("free_port.py: no %d free ports found in %d-%d" % (count, first, end - 1))
print(" ".join(str(s.getsockname()[1]) for s in held))
for s in held:
    s.close()
