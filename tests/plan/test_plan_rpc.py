"""RPC devices: parsing, llama.cpp's device order, the export, and plans that span them."""

from __future__ import annotations

import pytest

from fitplan.core.base.devices import GIB, DeviceKind, Machine, Vendor, assumed_gpu, host_device
from fitplan.core.base.errors import FlagError
from fitplan.core.launch.command_line import plan_to_args
from fitplan.core.launch.rpc import (
    DEFAULT_RPC_PORT,
    RpcServer,
    endpoints,
    parse_rpc_spec,
    rpc_devices,
    rpc_flag_value,
    rpc_server_commands,
    with_rpc,
)
from fitplan.core.plan.planner import MarginPolicy, plan
from support.fake_estimator import fake_estimate, make_profile


def test_parse_specs() -> None:
    s = parse_rpc_spec("192.168.1.20:50053=24GiB")
    assert (s.host, s.port, s.total_bytes) == ("192.168.1.20", 50053, 24 * GIB)
    assert s.endpoint == "192.168.1.20:50053"
    assert s.backend_name == "RPC0[192.168.1.20:50053]"
    assert parse_rpc_spec("gpu-box=16384MiB").port == DEFAULT_RPC_PORT
    v6 = parse_rpc_spec("[fe80::1]:50052=8GiB")
    assert v6.host == "fe80::1"
    assert v6.endpoint == "[fe80::1]:50052"
    for bad in ("192.168.1.20:50052", "host:99999=8GiB", "host:1=lots", "=8GiB"):
        with pytest.raises(FlagError):
            parse_rpc_spec(bad)


def test_repeated_endpoint_is_the_next_device_of_that_server() -> None:
    servers = rpc_devices(["a:1=8GiB", "b:2=16GiB", "a:1=24GiB"])
    assert [s.backend_name for s in servers] == ["RPC0[a:1]", "RPC0[b:2]", "RPC1[a:1]"]
    assert endpoints(servers) == ("a:1", "b:2")
    assert rpc_flag_value(servers) == "a:1,b:2"


def test_rpc_devices_come_first() -> None:
    local = Machine((assumed_gpu("RTX 4090", 24),), host_device(64 * GIB))
    m = with_rpc(local, rpc_devices(["10.0.0.2:50052=12GiB"]))
    assert [d.vendor for d in m.gpus] == [Vendor.RPC, Vendor.NVIDIA]
    assert m.gpus[0].backend_name == "RPC0[10.0.0.2:50052]"
    assert m.gpus[0].host == "10.0.0.2:50052"
    assert m.gpus[0].kind is DeviceKind.GPU
    # the local GPU keeps the name llama.cpp gives it, although it is no longer the first device
    assert m.gpus[1].backend_name == "CUDA0"
    assert with_rpc(local, ()) is local


def test_rpc_server_commands() -> None:
    servers = rpc_devices(["10.0.0.2:50052=12GiB", "10.0.0.3:50060=8GiB", "10.0.0.2:50052=12GiB"])
    cmds = rpc_server_commands(servers)
    assert [c.argv for c in cmds] == [
        ("ggml-rpc-server", "-H", "0.0.0.0", "-p", "50052"),
        ("ggml-rpc-server", "-H", "0.0.0.0", "-p", "50060"),
    ]
    assert "never expose it to an open network" in cmds[0].warning
    assert rpc_server_commands(servers[:1], bind="192.168.1.5", cache=True)[0].argv == (
        "ggml-rpc-server", "-H", "192.168.1.5", "-p", "50052", "-c"
    )  # fmt: skip


def test_plan_spans_rpc_and_local_gpus() -> None:
    # 32 layers of 100 MiB: an 8 GiB RPC device and a 4 GiB local GPU share the layers like two local GPUs
    rpc = rpc_devices(["10.0.0.2:50052=8GiB"])
    m = with_rpc(Machine((assumed_gpu("G", 4),), host_device(64 * GIB)), rpc)
    prof = make_profile(n_ctx_train=1 << 20)
    p = plan(prof, m, estimate_fn=fake_estimate)
    assert p.fits
    assert sum(p.placement.tensor_split) == 33
    assert p.placement.tensor_split[0] > p.placement.tensor_split[1]  # the larger device takes more layers
    labels = [u.label for u in p.context.usage]
    assert labels == ["RPC0[10.0.0.2:50052]", "GPU1 (G)", "host RAM"]
    margin = MarginPolicy()
    for i, d in enumerate(m.gpus):
        assert p.context.usage[i].used_bytes <= margin.capacity(d, i)
    argv = plan_to_args(p, "/m/model.gguf", rpc_servers=endpoints(rpc))
    assert argv[3:5] == ("--rpc", "10.0.0.2:50052")
    assert "-ts" in argv


def test_server_struct_defaults() -> None:
    s = RpcServer("h", total_bytes=GIB)
    assert s.device().free_bytes == GIB
    assert s.device().name == "RPC h:50052"
