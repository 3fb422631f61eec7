"""A stand-in endpoint with the emulator's command line (``endpoint_command``), for the stack's
lifecycle tests only: it loads the stack JSON exactly as the emulator must, checks the master's RPC
port answers, then serves ``/health``, ``/metrics`` and ``/v1/models`` on 127.0.0.1.

``FAKE_ENDPOINT_FAIL``: ``exit`` (exit 3 before serving), ``hang`` (never become healthy),
``nolib`` (exit with Python's message for a missing shared library), ``<name>`` (only that
endpoint exits).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--master", required=True)
    ap.add_argument("--disk-dir")
    a = ap.parse_args()

    from adev.config import StackConfig, from_dict, load_model_profile
    with open(a.config) as fh:
        cfg = from_dict(StackConfig, json.load(fh), "stack")
    model = load_model_profile(cfg.profile).name
    fail = os.environ.get("FAKE_ENDPOINT_FAIL", "")
    if fail == "exit" or fail == a.endpoint:
        print(f"fake endpoint {a.endpoint}: failing on purpose", flush=True)
        return 3
    if fail == "nolib":  # what Python prints when the store client's libraries are missing
        print("ImportError: libibverbs.so.1: cannot open shared object file: No such file or "
              "directory", flush=True)
        return 1
    host, _, port = a.master.rpartition(":")
    socket.create_connection((host, int(port)), timeout=5).close()
    if a.disk_dir and not os.path.isdir(a.disk_dir):
        print(f"disk dir {a.disk_dir} missing", flush=True)
        return 4
    if fail == "hang":
        signal.pause()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            if self.path == "/health":
                body, ctype = b"", "text/plain"
            elif self.path == "/metrics":
                body = (f'vllm:prompt_tokens_total{{model_name="{model}",engine="0"}} 0\n').encode()
                ctype = "text/plain"
            elif self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [{"id": model}]}).encode()
                ctype = "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer((cfg.host, a.port), H)
    def on_term(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    print(f"fake endpoint {a.endpoint} serving {model} on {cfg.host}:{a.port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
