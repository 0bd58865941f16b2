"""One TCP transfer between two simulated nodes (netns.sh's self-test).

  transfer.py serve ADDR PORT      accepts one connection, reads to EOF,
                                   answers how many bytes were right
  transfer.py send ADDR PORT N     sends N pattern bytes, prints the seconds
                                   from connect to the answer; exit 1 when
                                   the server saw other bytes than were sent
"""
import socket
import sys
import time


def pattern(n):
    block = bytes((i * 131 + 7) & 0xFF for i in range(65536))
    return (block * (n // len(block) + 1))[:n]


def serve(addr, port):
    with socket.create_server((addr, port)) as s:
        s.settimeout(20)
        conn, _ = s.accept()
        with conn:
            got = bytearray()
            while chunk := conn.recv(1 << 20):
                got += chunk
            right = len(got) if got == pattern(len(got)) else 0
            conn.sendall(right.to_bytes(8, "little"))


def send(addr, port, n):
    data = pattern(n)
    deadline = time.monotonic() + 10
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=10)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    with conn:
        start = time.monotonic()
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        answer = conn.recv(8)
        elapsed = time.monotonic() - start
    right = int.from_bytes(answer, "little") if len(answer) == 8 else -1
    if right != n:
        print(f"server saw {right} right bytes of {n}", file=sys.stderr)
        return 1
    print(f"{elapsed:.3f}")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
