#!/usr/bin/python3
"""The timed transfer that checks a shaped inter-host link before a run (ci/two_host.sh).

  link_probe.py serve IP PORT            one connection: answers pings, then takes one bulk
                                         transfer and acknowledges it once all bytes are in
  link_probe.py measure IP PORT BYTES [START]
                                         connects (retrying while the server starts), measures
                                         the round trip of 1-byte messages (median of 30) on
                                         the idle link, waits until CLOCK_MONOTONIC reaches
                                         START (if given: transfers timed at once start
                                         together), then the rate of BYTES of payload sent in
                                         one stream; prints one JSON line
  link_probe.py topology ARGS... < PATHS writes the topology object of the results file from
                                         the JSON lines of every path (see main())

Measured: the payload rate, what a TCP stream moves (the prediction's inter-node bandwidth).
tbf shapes frames as the veth queues them, Ethernet header included: at MTU 1500 with TCP
timestamps a full frame is 1514 B for 1448 B of payload, so the rate tbf holds is the payload
rate x 1514/1448 (WIRE_PER_PAYLOAD); that is the rate compared with the one requested.
The ack makes the time end when the last byte has arrived, not when it left the sender.
"""
import json
import socket
import statistics
import struct
import sys
import time

PINGS = 30
WIRE_PER_PAYLOAD = 1514 / 1448  # frame / TCP payload at MTU 1500 with timestamps


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return bytes(buf)


def serve(ip, port):
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((ip, port))
    lsock.listen(1)
    lsock.settimeout(30)
    conn, _ = lsock.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(PINGS):
        conn.sendall(recv_exact(conn, 1))
    (n,) = struct.unpack("!Q", recv_exact(conn, 8))
    left = n
    while left > 0:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed during the transfer")
        left -= len(chunk)
    conn.sendall(b"k")
    conn.close()


def connect(ip, port, deadline_s=10.0):
    t_end = time.monotonic() + deadline_s
    while True:
        try:
            return socket.create_connection((ip, port), timeout=60)
        except OSError:
            if time.monotonic() > t_end:
                raise
            time.sleep(0.05)


def measure(ip, port, nbytes, start_at=None):
    sock = connect(ip, port)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(PINGS):
        t0 = time.perf_counter()
        sock.sendall(b"p")
        recv_exact(sock, 1)
        rtts.append(time.perf_counter() - t0)
    payload = bytes(1 << 20)
    if start_at is not None:
        time.sleep(max(0.0, start_at - time.clock_gettime(time.CLOCK_MONOTONIC)))
    start = time.clock_gettime(time.CLOCK_MONOTONIC)  # one clock for every host's probe
    t0 = time.perf_counter()
    sock.sendall(struct.pack("!Q", nbytes))
    left = nbytes
    while left > 0:
        k = min(left, len(payload))
        sock.sendall(payload[:k] if k < len(payload) else payload)
        left -= k
    recv_exact(sock, 1)
    seconds = time.perf_counter() - t0
    sock.close()
    print(json.dumps({"bytes": nbytes, "seconds": seconds, "rate_bytes_per_s": nbytes / seconds,
                      "rtt_s": statistics.median(rtts), "rtt_min_s": min(rtts),
                      "start_s": start, "end_s": start + seconds}))


def topology(argv):
    """argv: HOSTS RANKS_PER_HOST GBPS LATENCY_MS BURST_BYTES QDISC UNSHAPED STREAM; stdin: one
    JSON line per path "<from> <to> {measure's JSON}". GBPS/LATENCY_MS "-" when not set; UNSHAPED:
    what every path moved at once before shaping (bytes over the span first start -> last
    end), "-" when not measured (then the paths' rates summed, timed one at a time); STREAM:
    the payload rate of one path alone before shaping, "-" when not measured (then the
    slowest path's)."""
    hosts, rph, gbps, lat_ms, burst, qdisc, unshaped, stream = argv
    paths = []
    for line in sys.stdin:
        if not line.strip():
            continue
        src, dst, doc = line.split(" ", 2)
        paths.append({"from": int(src), "to": int(dst), **json.loads(doc)})
    rate = min(p["rate_bytes_per_s"] for p in paths)
    # the link's own round trip: each path's fastest (a loaded host's scheduler adds the rest)
    rtt = statistics.median(p["rtt_min_s"] for p in paths)
    shaped = gbps != "-" or lat_ms != "-"
    rated = gbps != "-"
    out = {
        "hosts": "netns",
        "num_hosts": int(hosts),
        "ranks_per_host": int(rph),
        "link": "veth per host to one bridge, MTU 1500",
        "shaping": {
            "qdisc": qdisc,
            "requested_gbps": float(gbps) if rated else None,
            "requested_bytes_per_s": float(gbps) * 1e9 / 8 if rated else None,
            "burst_bytes": int(burst),
            "delay_ms": None if lat_ms == "-" else float(lat_ms),
            "where": ("rate: egress of both ends of every host's veth; " if rated else "") +
                     ("" if lat_ms == "-" else "delay: egress of the host end only"),
        } if shaped else None,
        "probe": {"method": "ci/link_probe.py: one TCP stream per path, host i -> host i+1, "
                            "after 30 1-byte round trips on the idle link",
                  "paths": paths},
        "achieved_bytes_per_s": rate,
        "achieved_gbps": rate * 8 / 1e9,
        "achieved_wire_bytes_per_s": rate * WIRE_PER_PAYLOAD,
        "rtt_s": rtt,
        # every path through the unshaped veths at once: what this machine's cores move for
        # all hosts together
        "unshaped_bytes_per_s": (sum(p["rate_bytes_per_s"] for p in paths) if unshaped == "-"
                                 else float(unshaped)),
        # one stream alone through the unshaped veth: a core at each end (the CPU a byte costs)
        "unshaped_stream_bytes_per_s": rate if stream == "-" else float(stream),
    }
    if rated:  # in tbf's units: frames
        out["rate_to_requested"] = rate * WIRE_PER_PAYLOAD / (float(gbps) * 1e9 / 8)
    json.dump(out, sys.stdout, indent=2)
    print()


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "serve" and len(sys.argv) == 4:
        serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) >= 2 and sys.argv[1] == "measure" and len(sys.argv) in (5, 6):
        measure(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                float(sys.argv[5]) if len(sys.argv) == 6 else None)
    elif len(sys.argv) == 10 and sys.argv[1] == "topology":
        topology(sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
