"""llama.cpp RPC devices: GPUs (or CPUs) on other hosts served by `ggml-rpc-server`.

* The user names each server as `host:port=SIZE` (the memory that server's device offers, e.g. `10.0.0.5:50052=24GiB`).
  Naming the same endpoint again adds a second device of that server (a server exposes every accelerator it has).
* llama.cpp lists RPC devices first, then local GPUs (`src/llama.cpp:llama_prepare_model_devices`); device k of the
  server at `host:port` is named `RPC<k>[host:port]` (ggml-rpc.cpp). A plan spans them exactly like local GPUs.
* The launch needs `--rpc host:port,...` on the main host, and on each remote host
  `ggml-rpc-server -H 0.0.0.0 -p PORT`. The RPC server is not secure: tools/rpc/README.md says never to run it on an
  open network, and the server itself warns whenever it binds to anything but 127.0.0.1. Bind it to the address of a
  private interface where possible.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fitplan.core.base.devices import LLAMA_MAX_DEVICES, Device, DeviceKind, Machine, Vendor
from fitplan.core.base.errors import FlagError
from fitplan.core.base.numbers import int_or_none
from fitplan.core.hardware.catalog import parse_size as catalog_parse_size
from fitplan.core.memory.weights import gpu_backend

__all__ = [
    "DEFAULT_RPC_PORT",
    "RPC_SECURITY_WARNING",
    "RpcHostCommand",
    "RpcServer",
    "endpoints",
    "parse_rpc_spec",
    "parse_size",
    "rpc_devices",
    "rpc_flag_value",
    "rpc_server_commands",
    "with_rpc",
]

#: ggml-rpc-server's default port (tools/rpc/rpc-server.cpp: rpc_server_params.port).
DEFAULT_RPC_PORT = 50052

RPC_SECURITY_WARNING = (
    "ggml-rpc-server has no authentication or encryption: never expose it to an open network. "
    "Binding to 0.0.0.0 listens on every interface; prefer the address of a private network interface, "
    "and allow only the main host through the firewall."
)


def parse_size(text: str) -> int:
    """Bytes of a size such as 24GiB, 24 GB, 24576MiB or 24 (GiB), read as `--assume-gpu` reads sizes."""
    n = catalog_parse_size(text)
    if n is None:
        raise FlagError(f"{text!r} is not a memory size like 24GiB or 16384MiB")
    return n


@dataclass(frozen=True, slots=True)
class RpcServer:
    """One device offered by a ggml-rpc-server."""

    host: str
    port: int = DEFAULT_RPC_PORT
    total_bytes: int = 0
    free_bytes: int | None = None  # None = all of it
    device_index: int = 0  # which device of that server (RPC<k>)
    description: str = ""

    @property
    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        return f"{host}:{self.port}"

    @property
    def backend_name(self) -> str:
        return f"RPC{self.device_index}[{self.endpoint}]"

    def device(self) -> Device:
        free = self.total_bytes if self.free_bytes is None else self.free_bytes
        return Device(
            name=self.description or f"RPC {self.endpoint}",
            kind=DeviceKind.GPU,
            total_bytes=self.total_bytes,
            free_bytes=free,
            vendor=Vendor.RPC,
            hypothetical=True,
            backend_name=self.backend_name,
            host=self.endpoint,
            detail="ggml-rpc-server",
        )


_SPEC = re.compile(r"(?P<host>\[[^\]]+\]|[^:=\s]+)(?::(?P<port>[0-9]+))?=(?P<size>.+)")


def parse_rpc_spec(spec: str, device_index: int = 0) -> RpcServer:
    """`host:port=SIZE` (port defaults to 50052) -> one RPC device."""
    m = _SPEC.fullmatch(spec.strip())
    if m is None:
        raise FlagError(f"--rpc {spec!r}: expected HOST:PORT=SIZE, for example 192.168.1.20:50052=24GiB")
    host = m.group("host").strip("[]")
    port = int_or_none(m.group("port"), 1, 65535) if m.group("port") else DEFAULT_RPC_PORT
    if port is None:
        raise FlagError(f"--rpc {spec[:60]!r}: the port must be 1 to 65535")
    size = parse_size(m.group("size"))
    if size <= 0:
        raise FlagError(f"--rpc {spec!r}: the device needs a size above zero")
    return RpcServer(host=host, port=port, total_bytes=size, device_index=device_index)


def rpc_devices(specs: Sequence[str]) -> tuple[RpcServer, ...]:
    """Several specs; a repeated endpoint is the next device of the same server."""
    out: list[RpcServer] = []
    count: dict[str, int] = {}
    if len(specs) > LLAMA_MAX_DEVICES:
        raise FlagError(
            f"--rpc: at most {LLAMA_MAX_DEVICES} devices in all (llama.cpp's device limit), got {len(specs)}"
        )
    for spec in specs:
        first = parse_rpc_spec(spec)
        k = count.get(first.endpoint, 0)
        count[first.endpoint] = k + 1
        out.append(
            RpcServer(first.host, first.port, first.total_bytes, first.free_bytes, k, first.description)
        )
    return tuple(out)


def endpoints(servers: Sequence[RpcServer]) -> tuple[str, ...]:
    """The distinct endpoints, in order: what `--rpc` lists."""
    seen: dict[str, None] = {}
    for s in servers:
        seen.setdefault(s.endpoint, None)
    return tuple(seen)


def rpc_flag_value(servers: Sequence[RpcServer]) -> str:
    return ",".join(endpoints(servers))


def with_rpc(machine: Machine, servers: Sequence[RpcServer]) -> Machine:
    """The machine with the RPC devices listed first, as llama.cpp enumerates them.

    Local GPUs without a llama.cpp name get the one they had before the RPC devices were put in front of them
    (CUDA0 stays CUDA0 although it is no longer the first device)."""
    if not servers:
        return machine
    if len(servers) + len(machine.gpus) > LLAMA_MAX_DEVICES:
        raise FlagError(
            f"at most {LLAMA_MAX_DEVICES} devices in all (llama.cpp's device limit); got {len(servers)} from --rpc "
            f"and {len(machine.gpus)} GPUs"
        )
    local: list[Device] = []
    for i, d in enumerate(machine.gpus):
        if not d.backend_name and d.vendor is not Vendor.RPC:
            d = replace(d, backend_name=gpu_backend(d, i).buffer_type)
        local.append(d)
    return Machine(gpus=(*(s.device() for s in servers), *local), host=machine.host)


@dataclass(frozen=True, slots=True)
class RpcHostCommand:
    """What to run on one remote host."""

    endpoint: str
    argv: tuple[str, ...]
    warning: str = RPC_SECURITY_WARNING


def rpc_server_commands(
    servers: Sequence[RpcServer],
    *,
    bind: str = "0.0.0.0",
    program: str = "ggml-rpc-server",
    cache: bool = False,
) -> tuple[RpcHostCommand, ...]:
    """One `ggml-rpc-server -H BIND -p PORT` per distinct endpoint (`-c` turns on its local tensor cache)."""
    out: list[RpcHostCommand] = []
    done: set[str] = set()
    for s in servers:
        if s.endpoint in done:
            continue
        done.add(s.endpoint)
        argv = [program, "-H", bind, "-p", str(s.port)]
        if cache:
            argv.append("-c")
        out.append(RpcHostCommand(s.endpoint, tuple(argv)))
    return tuple(out)
