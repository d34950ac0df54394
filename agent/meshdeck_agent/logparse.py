"""Lines of interest in worker logs: vLLM's startup numbers and NCCL's transport choices.

vLLM (old and new formats, with or without the `(Worker_TP0 pid=N)` / `(EngineCore_DP0 pid=N)` prefix):
    Model loading took 80.7812 GiB and 45.1 seconds        (also "... GiB memory and ...", V0's
                                                            "Loading model weights took 14.95 GB")
    Available KV cache memory: 46.80 GiB
    Explicitly set (1.0/23.54) GiB for KV cache on node 0.  (CPU build; also "Auto set (...) GiB for KV cache")
    GPU KV cache size: 715,072 tokens                      (also merged with the next line; CPU: "CPU KV cache")
    Maximum concurrency for 120,000 tokens per request: 2.48x
    Multiplying the GPU KV cache size by the dcp_world_size 8.
    # GPU blocks: 2048                                     (V0)
-> {"weights_gib", "load_seconds", "available_kv_gib", "kv_cache_tokens", "max_concurrency",
    "max_concurrency_tokens", "dcp_world_size", "gpu_blocks", "process", "pid"}

NCCL with NCCL_DEBUG=INFO (`host:pid:tid [cudaDev] NCCL INFO ...`, any prefix before it):
    Channel 00/0 : 1[1] -> 4[0] [send] via NET/IBext/0     -> what=channel, transport NET/IBext ...
    Channel 00 : 2[1] -> 0[0] via SHM/direct/direct        -> transport SHM
    ... via P2P/IPC/read, P2P/CUMEM, NET/IB/15/GDRDMA, NET/Socket/0, NVLS
    Using network IB | Socket | IBext                      -> what=network
    NET/IB : Using [0]mlx5_0:1/IB/SHARP [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>  -> what=net_devices
    NET/IB : No device found.                              -> what=net_devices, devices []
    NET/Socket : Using [0]eth0:192.168.1.10<0>             -> what=net_devices
    NVLS multicast support is available on dev 5           -> what=nvls
    NVLS Head  5:  5 13                                    -> what=nvls_head
    NCCL version 2.25.1+cuda12.2                           -> what=version
    Bootstrap : Using eth0:192.168.0.90<0>                 -> what=bootstrap
    NCCL_SOCKET_IFNAME set by environment to eth0          -> what=env (also NCCL_IB_HCA, NCCL_IB_DISABLE)
    NET/Plugin: ... Using internal network plugin.         -> what=net_plugin
    2 coll channels, 0 nvls channels, 2 p2p channels, ...  -> what=channels
    Connected all rings | trees                            -> what=connected
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

_VLLM_PROCESS = re.compile(r"\((?P<process>[A-Za-z][\w]*?)(?: pid=(?P<pid>\d+))?(?:,[^)]*)?\)")
_VLLM_PATTERNS = (
    (re.compile(r"Model loading took (?P<weights_gib>[\d.]+) GiB(?: memory)? and (?P<load_seconds>[\d.]+) s"), None),
    (re.compile(r"Loading model weights took (?P<weights_gib>[\d.]+) GB"), None),
    (re.compile(r"Available KV cache memory: (?P<available_kv_gib>-?[\d.]+) GiB"), None),
    # vLLM's CPU build: the budget each worker was given (VLLM_CPU_KVCACHE_SPACE) or sized from free memory
    (re.compile(r"(?:Explicitly|Auto) set \((?P<available_kv_gib>[\d.]+)/[\d.]+\) GiB for KV cache"), None),
    (re.compile(r"KV cache size: (?P<kv_cache_tokens>[\d,]+) tokens"), None),
    (
        re.compile(
            r"Maximum concurrency for (?P<max_concurrency_tokens>[\d,]+) tokens per request: (?P<max_concurrency>[\d.]+)x"
        ),
        None,
    ),
    (re.compile(r"Multiplying the GPU KV cache size by the dcp_world_size (?P<dcp_world_size>\d+)"), None),
    (re.compile(r"# GPU blocks: (?P<gpu_blocks>\d+)"), None),
)
_INTEGER_FIELDS = {"kv_cache_tokens", "max_concurrency_tokens", "dcp_world_size", "gpu_blocks"}


def parse_vllm_startup(line: str) -> Optional[Dict[str, Any]]:
    """The startup numbers in one vLLM log line, or None if it has none."""
    if "took" not in line and "KV cache" not in line and "concurrency" not in line and "GPU blocks" not in line:
        return None
    fields: Dict[str, Any] = {}
    for pattern, _ in _VLLM_PATTERNS:
        match = pattern.search(line)
        if not match:
            continue
        for name, raw in match.groupdict().items():
            text = raw.replace(",", "")
            fields[name] = int(text) if name in _INTEGER_FIELDS else float(text)
    if not fields:
        return None
    process = _VLLM_PROCESS.search(line)
    if process and line.lstrip().startswith("("):
        fields["process"] = process.group("process")
        if process.group("pid"):
            fields["pid"] = int(process.group("pid"))
    return fields


_NCCL_PREFIX = re.compile(r"(?P<host>[^\s:()\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
_CHANNEL = re.compile(
    r"^Channel (?P<channel>\d+)(?:/(?P<sub>\d+))? ?: (?P<src>\d+)\[(?P<src_dev>\d+)\] -> (?P<dst>\d+)\[(?P<dst_dev>\d+)\]"
    r"(?: \[(?P<direction>send|receive)\])? via (?P<via>.+?)\s*$"
)
_NET_USING = re.compile(r"^NET/(?P<plugin>\w+) ?: Using (?P<devices>.*?)(?:; OOB (?P<oob>\S+))?\s*$")
_IB_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^:\s\[\]]+):(?P<port>\d+)/(?P<link>[^\s\[\]]+)")
_SOCKET_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^:\s\[\]]+):(?P<address>[^<\s]+)<\d+>")
_CHANNEL_COUNTS = re.compile(
    r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?P<nvls>\d+) nvls channels, "
    r"(?P<p2p>\d+) p2p channels, (?P<per_peer>\d+) p2p channels per peer"
)


def transport_class(via: str) -> str:
    """'NET/IB/15/GDRDMA' -> 'net_ib'; 'NET/Socket/0' -> 'net_socket'; 'P2P/IPC/read' -> 'p2p'; 'SHM/...' -> 'shm'."""
    head = via.split("/")
    if head[0] == "NET" and len(head) > 1:
        return "net_socket" if head[1].lower() == "socket" else "net_ib" if head[1].startswith("IB") else "net_other"
    return {"P2P": "p2p", "SHM": "shm", "NVLS": "nvls", "COLLNET": "collnet"}.get(head[0].upper(), "other")


def _channel(match: "re.Match[str]") -> Dict[str, Any]:
    via = match.group("via")
    parts = via.split("/")
    fields: Dict[str, Any] = {
        "what": "channel",
        "channel": int(match.group("channel")),
        "src_rank": int(match.group("src")),
        "src_dev": int(match.group("src_dev")),
        "dst_rank": int(match.group("dst")),
        "dst_dev": int(match.group("dst_dev")),
        "direction": match.group("direction"),
        "via": via,
        "transport": "/".join(parts[:2]) if parts[0] in ("NET", "P2P") and len(parts) > 1 else parts[0],
        "transport_class": transport_class(via),
        "gdrdma": "GDRDMA" in parts,
    }
    if parts[0] == "NET" and len(parts) > 2 and parts[2].isdigit():
        fields["net_dev"] = int(parts[2])
    if parts[0] == "P2P" and len(parts) > 2:
        fields["mode"] = parts[2]
    return fields


def _nccl_message(message: str) -> Optional[Dict[str, Any]]:
    match = _CHANNEL.match(message)
    if match:
        return _channel(match)
    if message.startswith("Using network "):
        return {"what": "network", "network": message[len("Using network ") :].strip()}
    if message.startswith("NET/IB : No device found"):
        return {"what": "net_devices", "plugin": "IB", "devices": [], "oob": None}
    match = _NET_USING.match(message)
    if match:
        plugin = match.group("plugin")
        text = match.group("devices")
        devices: List[Dict[str, Any]] = []
        if plugin == "Socket":
            for dev in _SOCKET_DEVICE.finditer(text):
                devices.append(
                    {"index": int(dev.group("index")), "name": dev.group("name"), "address": dev.group("address")}
                )
        else:
            for dev in _IB_DEVICE.finditer(text):
                link = dev.group("link").split("/")
                devices.append(
                    {
                        "index": int(dev.group("index")),
                        "name": dev.group("name"),
                        "port": int(dev.group("port")),
                        "link": link[0],
                        "sharp": "SHARP" in link[1:],
                    }
                )
        return {
            "what": "net_devices",
            "plugin": plugin,
            "devices": devices,
            "relaxed_ordering": "[RO]" in text,
            "oob": match.group("oob"),
        }
    match = re.match(r"^NVLS multicast support is available on dev (\d+)", message)
    if match:
        return {"what": "nvls", "available": True, "dev": int(match.group(1))}
    match = re.match(r"^NVLS Head\s+(\d+):\s+([\d\s]+)$", message)
    if match:
        return {"what": "nvls_head", "channel": int(match.group(1)), "ranks": [int(x) for x in match.group(2).split()]}
    match = _CHANNEL_COUNTS.match(message)
    if match:
        return {
            "what": "channels",
            "coll": int(match.group("coll")),
            "nvls": int(match.group("nvls")),
            "p2p": int(match.group("p2p")),
            "p2p_per_peer": int(match.group("per_peer")),
        }
    match = re.match(r"^Connected all (rings|trees)", message)
    if match:
        return {"what": "connected", "topology": match.group(1)}
    return _nccl_setup(message)


_ENV_SET = re.compile(r"^(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*?)\.?\s*$")


def _nccl_setup(message: str) -> Optional[Dict[str, Any]]:
    """Setup lines that decide transports: version, bootstrap interface, NCCL_* settings, net plugin."""
    match = re.match(r"^NCCL version (\S+)", message)
    if match:
        return {"what": "version", "version": match.group(1)}
    match = re.match(r"^Bootstrap ?: Using (?P<name>[^:\s]+):(?P<address>[^<\s]+)", message)
    if match:
        return {"what": "bootstrap", "interface": match.group("name"), "address": match.group("address")}
    match = _ENV_SET.match(message)
    if match:
        return {"what": "env", "name": match.group("name"), "value": match.group("value")}
    if message.startswith("NET/Plugin"):
        return {"what": "net_plugin", "internal": "internal network plugin" in message, "message": message}
    match = re.match(r"^P2P plugin (\S+)", message)
    if match:
        return {"what": "net_plugin", "internal": False, "plugin": match.group(1), "message": message}
    return None


def parse_nccl_transport(line: str) -> Optional[Dict[str, Any]]:
    """The transport facts in one NCCL_DEBUG=INFO line, or None."""
    if "NCCL INFO" not in line:
        return None
    prefix = _NCCL_PREFIX.search(line)
    message = prefix.group("msg") if prefix else line.split("NCCL INFO", 1)[1].strip()
    fields = _nccl_message(message.strip())
    if fields is None:
        return None
    if prefix:
        fields["host"] = prefix.group("host")
        fields["pid"] = int(prefix.group("pid"))
        fields["cuda_dev"] = int(prefix.group("dev"))
    return fields


def parse_line(line: str) -> Optional[Dict[str, Any]]:
    """{"kind": "vllm_startup" | "nccl_transport", "fields": {...}} for a line of interest, else None."""
    nccl = parse_nccl_transport(line)
    if nccl is not None:
        return {"kind": "nccl_transport", "fields": nccl}
    vllm = parse_vllm_startup(line)
    if vllm is not None:
        return {"kind": "vllm_startup", "fields": vllm}
    return None
