"""A stand-in for ``python -m sglang.launch_server`` in the tests of the e2e server route (no GPU here).

Serves ``/health``, ``/flush_cache`` and ``/generate`` (greedy-like: the output ids are a function of the input
ids, the same with and without the flag unless FAKE_SERVER_DIFFER=1; ``cached_tokens`` is the longest prefix
of an earlier sequence since the last flush), prints an activation line like the plugin's when
``--enable-mamba-conv-dedup`` is given, and spawns a child "scheduler" process that writes a status report
into SGLANG_MAMBA_DEDUP_REPORT_DIR, so the driver's stop must take the whole process group down (with the flag
and SGLANG_MAMBA_DEDUP_ZERO_COPY=1 the report shows the zero-copy commit on, or FAKE_SERVER_ZERO_COPY's decision;
with the radix cache on, as the plugin's gate, "off: radix cache on" where SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX=0 (the
opt-out), else ``zc_track_commits`` FAKE_SERVER_ZC_TRACK, default 5, ``absent``: not recorded).
FAKE_SERVER_FAIL=1 exits before it is healthy (FAKE_SERVER_FAIL=on: only with the flag); FAKE_SERVER_NO_TRACK=1
reports no commit with track slots; FAKE_SERVER_LOG=path appends "off|on PATH" of every request there;
FAKE_SERVER_CHILD_PID_FILE=path appends the child's pid there (FAKE_SERVER_CHILD_SLOW=seconds: at once, then the
child waits that long before it asks for the parent-death signal, as a scheduler importing SGLang does),
FAKE_SERVER_PID_FILE=path the server's own;
FAKE_SERVER_DELAY=seconds delays every /generate; FAKE_SERVER_IGNORE_TERM=1 outlives SIGTERM (a server stuck in
its teardown; its child does not) and appends its pid to FAKE_SERVER_TERM_FILE=path on each; FAKE_SERVER_ANSWER shapes the /generate answers: ``no_ids`` (no output_ids), ``empty`` (no
tokens), ``short`` (one token), ``strings`` (strings, not objects), ``ids_str`` (output_ids a string),
``negative`` (completion_tokens -5), ``fail`` (HTTP 500; ``fail_on``: only with the flag);
FAKE_SERVER_HEALTH_TEXT=1 answers /health with a text body.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHILD = """
import ctypes, json, os, signal, sys, time
from pathlib import Path
slow = float(os.environ.get("FAKE_SERVER_CHILD_SLOW") or 0)
if slow:  # a scheduler's imports take seconds before it asks for the parent-death signal: it exists meanwhile
    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(slow)
ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # as SGLang's scheduler does (kill_itself_when_parent_died)
flag = sys.argv[1] == "1"
d = os.environ.get("SGLANG_MAMBA_DEDUP_REPORT_DIR")
if d:
    track = 0 if os.environ.get("FAKE_SERVER_NO_TRACK") == "1" else 8
    ev = {"commit_calls": 8, "ours_commit_calls": 8 if flag else 0,
          "track_commit_calls": track, "ours_track_commit_calls": track if flag else 0}
    if flag:
        ev["dedup_layout"] = {"state": "upstream", "reason": None, "dense_bytes": 200, "physical_bytes": 100}
    if flag and os.environ.get("SGLANG_MAMBA_DEDUP_ZERO_COPY") == "1":
        radix = sys.argv[3] == "1"
        if radix and os.environ.get("SGLANG_MAMBA_DEDUP_ZERO_COPY_RADIX") == "0":
            ev.update(zero_copy="off: radix cache on", zc_commit_calls=0)
        else:
            ev.update(zero_copy=os.environ.get("FAKE_SERVER_ZERO_COPY", "on"), zc_commit_calls=8)
            zc_track = os.environ.get("FAKE_SERVER_ZC_TRACK", "5")
            if radix and zc_track != "absent":
                ev["zc_track_commits"] = int(zc_track)
    doc = {"pid": os.getpid(), "mode": "on" if flag else "off", "sglang": "fake", "events": ev, "patches": {}}
    Path(d, f"status-{os.getpid()}.json").write_text(json.dumps(doc))
if not slow:
    with open(sys.argv[2], "a") as f:
        f.write(f"{os.getpid()}\\n")
time.sleep(3600)
"""


def reshape(answer, shape):
    """One /generate answer as FAKE_SERVER_ANSWER shapes it."""
    if shape == "no_ids":
        return {"meta_info": {}}
    if shape == "strings":
        return "x"
    if shape in ("empty", "short", "ids_str"):
        ids = {"empty": [], "short": answer["output_ids"][:1], "ids_str": "abc"}[shape]
        return dict(answer, output_ids=ids, meta_info=dict(answer["meta_info"], completion_tokens=len(ids)))
    if shape == "negative":
        return dict(answer, meta_info=dict(answer["meta_info"], completion_tokens=-5))
    return answer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--enable-mamba-conv-dedup", action="store_true")
    ap.add_argument("--disable-radix-cache", action="store_true")
    args, _ = ap.parse_known_args()
    fail = os.environ.get("FAKE_SERVER_FAIL")
    if fail == "1" or (fail == "on" and args.enable_mamba_conv_dedup):
        print("fake server: failing on purpose", flush=True)
        sys.exit(7)
    flag = args.enable_mamba_conv_dedup
    if flag:
        print(
            f"sglang-mamba-dedup 0.1.0 (SGLang fake, pid {os.getpid()}) [--enable-mamba-conv-dedup given]: on, "
            "takeover mode; applied commit, dedup_layout, estimator",
            file=sys.stderr,
            flush=True,
        )
    if os.environ.get("FAKE_SERVER_IGNORE_TERM") == "1":
        term_file = os.environ.get("FAKE_SERVER_TERM_FILE")

        def outlive_term(*_):
            if term_file:
                with open(term_file, "a") as f:
                    f.write(f"{os.getpid()}\n")

        signal.signal(signal.SIGTERM, outlive_term)
    if os.environ.get("FAKE_SERVER_PID_FILE"):
        with open(os.environ["FAKE_SERVER_PID_FILE"], "a") as f:
            f.write(f"{os.getpid()}\n")
    pid_file = os.environ.get("FAKE_SERVER_CHILD_PID_FILE", "/dev/null")
    radix = "0" if args.disable_radix_cache else "1"
    subprocess.Popen([sys.executable, "-c", CHILD, "1" if flag else "0", pid_file, radix])
    shift = 1 if (flag and os.environ.get("FAKE_SERVER_DIFFER") == "1") else 0
    seen = []  # the sequences (prompt + output) served since the last flush: the "prefix cache"
    request_log = os.environ.get("FAKE_SERVER_LOG")
    delay = float(os.environ.get("FAKE_SERVER_DELAY") or 0)
    shape = os.environ.get("FAKE_SERVER_ANSWER", "")

    def cached(ids):
        best = 0
        for seq in seen:
            n = 0
            while n < min(len(seq), len(ids)) and seq[n] == ids[n]:
                n += 1
            best = max(best, n)
        return best

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health" and os.environ.get("FAKE_SERVER_HEALTH_TEXT") == "1":
                text = b"OK"
                self.send_response(200)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
                return
            self._send(200 if self.path == "/health" else 404, {})

        def do_POST(self):
            if request_log:
                with open(request_log, "a") as f:
                    f.write(f"{'on' if flag else 'off'} {self.path}\n")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/flush_cache":
                seen.clear()
                text = b"Cache flushed.\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
                return
            if self.path != "/generate":
                self._send(404, {})
                return
            time.sleep(delay)
            if shape == "fail" or (shape == "fail_on" and flag):
                self._send(500, {"error": "failing on purpose"})
                return
            req = json.loads(body)
            n = req["sampling_params"]["max_new_tokens"]
            items = req.get("input_ids") or req.get("text")
            out = []
            for item in items:
                ids = item if isinstance(item, list) else [ord(c) for c in item]
                gen = [(sum(ids) * (i + 7) + shift) % 1000 for i in range(n)]
                hit = cached(ids)
                seen.append(list(ids) + gen)
                out.append(
                    {
                        "output_ids": gen,
                        "text": None,
                        "meta_info": {
                            "completion_tokens": n,
                            "prompt_tokens": len(ids),
                            "cached_tokens": hit,
                            "spec_verify_ct": max(1, n // 2),
                        },
                    }
                )
            self._send(200, [reshape(o, shape) for o in out])

    time.sleep(0.5)  # not healthy at once, as a real server
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
