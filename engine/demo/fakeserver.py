"""An embedded Redis for ``make demo`` on machines without ``redis-server``.

``python -m ghostless.demo.fakeserver PORT`` serves fakeredis (with Lua through lupa) on
127.0.0.1:PORT until SIGTERM or SIGINT. It keeps everything in memory: fine for a
demo, never for production (no persistence, one process, no INFO/CONFIG, so the
start-up checks report the server as unverifiable).
"""

from __future__ import annotations

import signal
import sys
import threading

from fakeredis import TcpFakeServer


def serve(port: int, host: str = "127.0.0.1") -> TcpFakeServer:
    """Start serving in a background thread; ``server.shutdown()`` stops it."""
    try:
        import lupa  # noqa: F401  (fakeredis runs EVAL only when lupa is installed)
    except ImportError:
        raise SystemExit("ghostless.demo.fakeserver needs lupa for Lua scripts: pip install lupa") from None
    server = TcpFakeServer((host, port), server_type="redis")
    server.daemon_threads = True  # a client that never hangs up must not keep the process alive
    threading.Thread(target=server.serve_forever, name="fakeredis-tcp", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit() or not 0 < int(argv[0]) < 65536:
        print("usage: python -m ghostless.demo.fakeserver PORT", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = serve(int(argv[0]))
    print(f"fakeredis serving on 127.0.0.1:{argv[0]} (in memory, for demos only)", flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
