"""Byte relays between loopback TCP ports and unix sockets, to join a process in a network namespace of its
own to the cluster's loopback (`isolated_argvs`): a program whose listeners bind every interface and cannot
be told otherwise runs in one, where every interface is its own loopback (docs/hpa.md: KEDA's metrics API
server; docs/karpenter.md: Karpenter's metrics and health probe).

    python -m fakeplugin.cluster.bridge LISTEN=CONNECT... [-- COMMAND...]

LISTEN and CONNECT are `tcp:PORT` (127.0.0.1 only) or `unix:PATH`. Each connection accepted on LISTEN gets
a new one to CONNECT and the bytes are copied both ways until either side closes; TLS passes through
untouched. With a COMMAND, it runs as a child (killed when the bridge dies) and the bridge exits with its
status; SIGTERM stops the child, then the bridge.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"
CHUNK = 65536
PR_SET_PDEATHSIG = 1
# In a network namespace of its own, with only its loopback up, then `exec`s the bridge.
NETNS = 'ip link set lo up\nexec "$@"\n'

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class RelayEnd:
    """One end of a relay: a loopback TCP port, or a unix socket path."""

    port: int | None = None
    path: Path | None = None

    @classmethod
    def parse(cls, text: str) -> RelayEnd:
        kind, _, value = text.partition(":")
        if kind == "tcp" and value.isdigit() and 0 < int(value) < 65536:
            return cls(port=int(value))
        if kind == "unix" and value:
            return cls(path=Path(value))
        raise ValueError(f"{text!r}: expected tcp:PORT or unix:PATH")

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.path is not None:
            return await asyncio.open_unix_connection(self.path)
        return await asyncio.open_connection(LOOPBACK, self.port)

    async def serve(self, handler: Handler) -> asyncio.Server:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            return await asyncio.start_unix_server(handler, self.path)
        return await asyncio.start_server(handler, LOOPBACK, self.port)


def bridge_argv(*pairs: str) -> list[str]:
    """This module's command line relaying `pairs` (LISTEN=CONNECT)."""
    return [sys.executable, "-m", "fakeplugin.cluster.bridge", *pairs]


def isolated_argvs(name: str, pairs: list[str], argv: list[str]) -> list[list[str]]:
    """The command lines (one per exec stage, as the supervisor records them) of `argv` in a network
    namespace of its own named `name` in `ps`, where a bridge relays `pairs` to the host's side: for a
    program that binds every interface and cannot be told otherwise. Needs unshare (check_host)."""
    unshare, sh = shutil.which("unshare"), shutil.which("sh")
    assert unshare and sh  # check_host found them
    inner = [sh, "-ec", NETNS, name, *bridge_argv(*pairs, "--", *argv)]
    return [[unshare, "--net", "--", *inner], inner, inner[4:]]


def parse_pairs(specs: list[str]) -> list[tuple[RelayEnd, RelayEnd]]:
    pairs = []
    for spec in specs:
        listen, sep, connect = spec.partition("=")
        if not sep:
            raise ValueError(f"{spec!r}: expected LISTEN=CONNECT")
        pairs.append((RelayEnd.parse(listen), RelayEnd.parse(connect)))
    return pairs


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _relay(target: RelayEnd, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        upstream_reader, upstream_writer = await target.connect()
    except OSError:
        writer.close()
        return
    await asyncio.gather(_copy(reader, upstream_writer), _copy(upstream_reader, writer))
    for w in (writer, upstream_writer):
        w.close()
        with contextlib.suppress(ConnectionError, OSError):
            await w.wait_closed()


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def run(pairs: list[tuple[RelayEnd, RelayEnd]], command: list[str]) -> int:
    servers = []
    for listen, target in pairs:

        async def handler(
            r: asyncio.StreamReader, w: asyncio.StreamWriter, target: RelayEnd = target
        ) -> None:
            await _relay(target, r, w)

        servers.append(await listen.serve(handler))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    child = None
    if command:
        child = subprocess.Popen(command, preexec_fn=_die_with_parent)
        loop.create_task(asyncio.to_thread(child.wait)).add_done_callback(lambda _: stop.set())
    await stop.wait()
    for server in servers:
        server.close()
    if child is None:
        return 0
    if child.poll() is None:
        child.terminate()
        try:
            await asyncio.wait_for(asyncio.to_thread(child.wait), 10)
        except TimeoutError:
            child.kill()
    return child.wait()


def main(argv: list[str]) -> int:
    specs, command = argv, []
    if "--" in argv:
        i = argv.index("--")
        specs, command = argv[:i], argv[i + 1 :]
    try:
        pairs = parse_pairs(specs)
    except ValueError as exc:
        print(f"bridge: {exc}", file=sys.stderr)
        return 2
    if not pairs:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"bridge {os.getpid()}: " + " ".join(specs), file=sys.stderr, flush=True)
    return asyncio.run(run(pairs, command))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
