"""A stand-in for ``python -m sglang.launch_server`` in the tests of the e2e server route (no GPU here).

Serves ``/health`` and ``/generate`` (greedy-like: the output ids are a function of the input ids, the same
with and without the flag unless FAKE_SERVER_DIFFER=1), prints an activation line like the plugin's when
``--enable-mamba-conv-dedup`` is given, and spawns a child "scheduler" process that writes a status report
into SGLANG_MAMBA_DEDUP_REPORT_DIR, so the driver's stop must take the whole process group down.
FAKE_SERVER_FAIL=1 exits before it is healthy.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHILD = """
import json, os, sys, time
from pathlib import Path
flag = sys.argv[1] == "1"
d = os.environ.get("SGLANG_MAMBA_DEDUP_REPORT_DIR")
if d:
    ev = {"commit_calls": 8, "ours_commit_calls": 8 if flag else 0}
    if flag:
        ev["dedup_layout"] = {"state": "upstream", "reason": None, "dense_bytes": 200, "physical_bytes": 100}
    doc = {"pid": os.getpid(), "mode": "on" if flag else "off", "sglang": "fake", "events": ev, "patches": {}}
    Path(d, f"status-{os.getpid()}.json").write_text(json.dumps(doc))
Path(sys.argv[2]).write_text(str(os.getpid()))
time.sleep(3600)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--enable-mamba-conv-dedup", action="store_true")
    args, _ = ap.parse_known_args()
    if os.environ.get("FAKE_SERVER_FAIL") == "1":
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
    pid_file = os.environ.get("FAKE_SERVER_CHILD_PID_FILE", "/dev/null")
    subprocess.Popen([sys.executable, "-c", CHILD, "1" if flag else "0", pid_file])
    shift = 1 if (flag and os.environ.get("FAKE_SERVER_DIFFER") == "1") else 0

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
            self._send(200 if self.path == "/health" else 404, {})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = req["sampling_params"]["max_new_tokens"]
            items = req.get("input_ids") or req.get("text")
            out = []
            for item in items:
                ids = item if isinstance(item, list) else [ord(c) for c in item]
                gen = [(sum(ids) * (i + 7) + shift) % 1000 for i in range(n)]
                out.append(
                    {
                        "output_ids": gen,
                        "text": None,
                        "meta_info": {"completion_tokens": n, "spec_verify_ct": max(1, n // 2)},
                    }
                )
            self._send(200, out)

    time.sleep(0.5)  # not healthy at once, as a real server
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
