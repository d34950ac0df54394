"""A hostile agent on stdin/stdout, for the soak test: it speaks the protocol well enough to be connected,
then either floods or poisons. Usage: python hostile_agent.py flood|poison [GPUS]

flood   after `samples.subscribe`, writes valid samples (seq ascending, 500 per event) as fast as the
        pipe takes them, and answers `samples.read` from the same endless sequence: it never runs dry.
poison  after `samples.subscribe`, every 50 ms sends a mix the app must refuse without harm: samples
        with ts = 1e17 / 1e12, seq = 2**70, wrong types, nulls where objects belong, huge strings,
        non-JSON lines, JSON that is not an object, unknown events, error replies for no request,
        answers to requests nobody asked — and now and then one good sample (which must be stored).

Like `meshdeck-agent attach`, it exits as soon as its stdin closes. Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

GIB = 2**30


def gpu(index: int, seq: int) -> dict[str, object]:
    return {
        "index": index,
        "uuid": f"GPU-hostile-{index}",
        "memory_used_bytes": 100 * GIB + seq % 1000,
        "memory_total_bytes": 141 * GIB,
        "utilization_pct": 50,
        "power_w": 400.0,
        "temperature_c": 60,
        "nvlink_tx_bytes_per_s": 1e10,
        "nvlink_rx_bytes_per_s": 1e10,
        "nvlink_links": [[5.5e8, 5.5e8]] * 18,
        "pcie_tx_bytes_per_s": 1e9,
        "pcie_rx_bytes_per_s": 1e9,
    }


class Agent:
    def __init__(self, mode: str, gpus: int) -> None:
        self.mode = mode
        self.gpus = gpus
        self.out = sys.stdout.buffer
        self.lock = threading.Lock()
        self.subscribed = threading.Event()
        self.seq = 0
        self.start = time.time() - 3600  # the flood's samples are an hour of history, 1 ms apart

    def send(self, data: bytes) -> None:
        with self.lock:
            self.out.write(data)
            self.out.flush()

    def message(self, obj: object) -> None:
        self.send(json.dumps(obj).encode() + b"\n")

    def sample(self, seq: int, ts: float | None = None) -> dict[str, object]:
        return {
            "seq": seq,
            "ts": ts if ts is not None else self.start + seq / 1000,
            "simulated": True,
            "gpus": [gpu(i, seq) for i in range(self.gpus)],
            "host": {"cpu_pct": 10.0},
        }

    def inventory(self) -> dict[str, object]:
        return {
            "hostname": "hostile\x1b[2J",
            "agent": "0.1.0",
            "simulated": True,
            "gpus": [{"index": i, "name": "NVIDIA H200", "memory_total_bytes": 141 * GIB} for i in range(self.gpus)],
            "nics": [],
        }

    def answer(self, request: dict[str, object]) -> None:
        method, request_id = request.get("method"), request.get("id")
        params = request.get("params") or {}
        assert isinstance(params, dict)
        if method == "inventory":
            result: object = self.inventory()
        elif method == "samples.subscribe":
            result = {"subscribed": True, "first_seq": 1, "last_seq": self.seq, "interval_s": 1.0}
            self.subscribed.set()
        elif method == "samples.read":
            since = int(params.get("since_seq") or 0)
            limit = min(int(params.get("limit") or 600), 600)
            last = max(self.seq, since + limit) if self.mode == "flood" else self.seq
            chosen = [self.sample(s) for s in range(since + 1, min(last, since + limit) + 1)]
            if self.mode == "poison":  # its ring "lost" everything: the app counts the gap as dropped
                chosen = []
            result = {"samples": chosen, "dropped": 0, "first_seq": 1, "last_seq": last, "more": False}
        elif method == "agent.time":
            result = {"time": time.time()}
        else:
            self.message({"id": request_id, "error": {"code": "unknown_method", "message": str(method)}})
            return
        self.message({"id": request_id, "result": result})

    def read_requests(self) -> None:
        for line in sys.stdin.buffer:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "method" in obj:
                self.answer(obj)
        os._exit(0)  # stdin closed: the app went away, as attach does

    def flood(self) -> None:
        template = json.dumps(self.sample(0)).encode()
        head, tail = template.split(b'"seq": 0', 1)
        _, tail = tail.split(b', "simulated"', 1)
        while True:
            first = self.seq + 1
            self.seq += 500
            body = b",".join(
                head + b'"seq": %d, "ts": %.3f, "simulated"' % (s, self.start + s / 1000) + tail
                for s in range(first, self.seq + 1)
            )
            self.send(b'{"event":"samples","data":{"dropped":0,"samples":[' + body + b"]}}\n")

    def poison(self) -> None:
        now = time.time
        next_good = now()
        while True:
            self.seq += 1
            bad = [
                self.sample(self.seq, ts=1e17),
                self.sample(self.seq, ts=1e12),
                {**self.sample(self.seq, now()), "seq": 2**70},
                {**self.sample(self.seq, now()), "gpus": 5},
                {**self.sample(self.seq, now()), "gpus": [{"index": 0, "memory_used_bytes": "lots"}]},
                {**self.sample(self.seq, now()), "host": None, "nics": [None]},
                {**self.sample(self.seq, now()), "workers": [{"id": "x" * 100_000, "metrics": {}}]},
                {**self.sample(self.seq, now()), "ts": float("nan")},
                [1, 2, 3],
                None,
            ]
            self.message({"event": "samples", "data": {"samples": bad, "dropped": 0}})
            self.send(b"this is not json\n")
            self.send(b"[1, 2, 3]\n")
            self.send(b'{"event": "nonsense", "data": {}}\n')
            self.send(b'{"id": null, "error": {"code": "internal", "message": "' + b"x" * 10_000 + b'"}}\n')
            self.send(b'{"id": 999999, "result": {"unasked": true}}\n')
            self.message({"event": "samples", "data": {"samples": "not a list"}})
            if now() >= next_good:  # one good sample a second, which must be stored
                next_good += 1.0
                self.message({"event": "samples", "data": {"samples": [self.sample(self.seq, now())], "dropped": 0}})
            time.sleep(0.05)


def main() -> int:
    mode = sys.argv[1]
    agent = Agent(mode, int(sys.argv[2]) if len(sys.argv) > 2 else 8)
    agent.message({"hello": {"protocol": 1, "agent": "0.1.0-hostile", "epoch": f"hostile-{mode}-{os.getpid()}"}})
    threading.Thread(target=agent.read_requests, daemon=True).start()
    agent.subscribed.wait()
    try:
        agent.flood() if mode == "flood" else agent.poison()
    except (BrokenPipeError, OSError):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
