"""A bounded load generator for an OpenAI-compatible server (vLLM's `/v1/completions`).

    result = send_completions("http://127.0.0.1:8000/v1", model, requests=32, concurrency=8)
    result.ok, result.failed, result.errors[:3]

Each request asks for `max_tokens` tokens with `ignore_eos`, so a request keeps its KV blocks for a known
number of decode steps (the KV-cache chart then has something to show). `concurrency` requests are in
flight at once, on that many threads; every request has a timeout, and the whole run a deadline after
which no new request starts. Only loopback or the deployment's own serving address is ever the target:
the caller passes the plan's serving URL.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

MAX_ERRORS_KEPT = 20
MAX_REPLY_BYTES = 1 << 20
MAX_TEXTS_KEPT = 1000


@dataclass
class LoadResult:
    ok: int = 0
    failed: int = 0
    completion_tokens: int = 0
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)  # the first MAX_ERRORS_KEPT, each one line
    prompt_tokens: int = 0  # as the server counted them (usage.prompt_tokens)
    texts: dict[int, str] = field(default_factory=dict)  # request index -> its completion (keep_texts=True)


def prompt_for(index: int, prompt_chars: int) -> str:
    """A distinct prompt per request (no prefix sharing to hide KV use): words cycled from the index."""
    words = ("mesh", "deck", "latent", "expert", "router", "token", "block", "cache")
    text = " ".join(f"{words[(index + k) % len(words)]}{index}" for k in range(prompt_chars // 6 + 1))
    return text[:prompt_chars]


def send_completions(
    base_url: str,
    model: str,
    *,
    requests: int,
    concurrency: int = 8,
    max_tokens: int = 48,
    prompt_chars: int = 96,
    request_timeout_s: float = 600.0,
    deadline_s: float = 1800.0,
    stop: threading.Event | None = None,
    keep_texts: bool = False,
) -> LoadResult:
    """Send `requests` completions to `base_url`/completions, `concurrency` at a time; count what came back.
    Setting `stop` ends the run after the requests in flight (the ones not sent count as failed). The prompts
    are the same for the same indices on every run and sampling is greedy, so `keep_texts` answers from two
    servers of the same weights compare token for token (at most MAX_TEXTS_KEPT are kept)."""
    result = LoadResult()
    lock = threading.Lock()
    next_index = iter(range(requests))
    started = time.monotonic()

    def one(index: int) -> None:
        body = {"model": model, "prompt": prompt_for(index, prompt_chars), "max_tokens": max_tokens,
                "ignore_eos": True, "temperature": 0.0}  # fmt: skip
        request = urllib.request.Request(
            f"{base_url.rstrip('/')}/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=request_timeout_s) as reply:
                answer = json.loads(reply.read(MAX_REPLY_BYTES))
            tokens = int(answer["usage"]["completion_tokens"])
            prompt_tokens = int(answer["usage"].get("prompt_tokens") or 0)
            text = str(answer["choices"][0]["text"]) if keep_texts else None
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            message = _one_line(exc)
            with lock:
                result.failed += 1
                if len(result.errors) < MAX_ERRORS_KEPT:
                    result.errors.append(message)
            return
        with lock:
            result.ok += 1
            result.completion_tokens += tokens
            result.prompt_tokens += prompt_tokens
            if text is not None and len(result.texts) < MAX_TEXTS_KEPT:
                result.texts[index] = text

    def run() -> None:
        while time.monotonic() - started < deadline_s and not (stop is not None and stop.is_set()):
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            one(index)

    threads = [threading.Thread(target=run, name=f"load-{n}", daemon=True) for n in range(max(1, concurrency))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with lock:
        result.failed += sum(1 for _ in next_index)  # never sent: the deadline passed, or `stop`
    result.elapsed_s = time.monotonic() - started
    return result


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            detail = exc.read(4096).decode("utf-8", "replace")
        except OSError:
            detail = ""
        return f"HTTP {exc.code}: {' '.join(detail.split())[:300]}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
