#!/usr/bin/env python3
"""Soak test of `offgrid serve`: the agent workload plus faults, for a given time, sampling RSS and /health.

Starts `offgrid serve -m MODEL --port 0 SERVER_ARGS` (or uses --url and --pid of a running server) and runs, until
the time is up:
  * the agent workload (`offgrid bench-serve --workload agent`, a new seed each round): every request is well
    formed, so every failure counts;
  * clients that vanish mid-stream: a streamed request, read until its first token, then the socket closed (half
    of them with a reset, SO_LINGER 0);
  * idle half-open connections: a request line and half the headers, then nothing, held until the server drops
    them (and opened again);
  * bodies that must be refused: over --max-body (413), malformed JSON (400), ambiguous framing (400), bytes that
    are not UTF-8 (400): any other status counts as unexpected;
  * once a second: GET /health (a 2 s timeout; every failure counts) and the server's RSS (/proc/PID/status).

Prints a JSON report and exits 1 when a well-formed request failed, /health failed, a refusal had an unexpected
status, the server died, or the RSS median of the last quarter of the run exceeds that of the second quarter
(after warm-up) by more than --rss-growth-mb.

  scripts/soak_serve.py --binary build/offgrid --model M.gguf --duration 1800 -- -np 8 -c 262144 --cache-ram 2048
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default="build/offgrid", help="the offgrid executable")
    p.add_argument("--model", default="", help="GGUF model (default: a generated tiny model)")
    p.add_argument("--url", default="", help="a running server instead of starting one (http://HOST:PORT)")
    p.add_argument("--pid", type=int, default=0, help="with --url: the server's pid, for RSS")
    p.add_argument("--duration", type=float, default=1800, help="seconds (default 1800)")
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--system-tokens", type=int, default=1500)
    p.add_argument("--tool-tokens", default="300,2000")
    p.add_argument("--reply-tokens", default="50,200")
    p.add_argument("--vanishers", type=int, default=2, help="threads of clients that vanish mid-stream")
    p.add_argument("--idle", type=int, default=32, help="half-open connections held at once")
    p.add_argument("--max-body", type=int, default=4 << 20, help="the server's --max-body")
    p.add_argument("--rss-growth-mb", type=float, default=64)
    p.add_argument("server_args", nargs="*", help="after --: arguments for offgrid serve")
    return p.parse_args()


class Soak:
    def __init__(self, a):
        self.a = a
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.counts = {"agent_rounds": 0, "agent_requests_ok": 0, "agent_requests_failed": 0, "vanished": 0,
                       "idle_opened": 0, "idle_dropped": 0, "refusals": 0, "unexpected_status": 0, "health_ok": 0, "health_failed": 0}
        self.health_ms = []
        self.rss = []  # (seconds since start, MiB)
        self.errors = []
        self.proc = None
        self.host, self.port, self.pid = "127.0.0.1", 0, a.pid
        self.model_id = ""

    def count(self, key, n=1, error=None):
        with self.lock:
            self.counts[key] += n
            if error and len(self.errors) < 20:
                self.errors.append(error)

    # ------------------------------------------------------------------ server
    def start(self):
        a = self.a
        if a.url:
            m = re.match(r"http://([^:/]+):(\d+)", a.url)
            if not m:
                sys.exit("--url: give http://HOST:PORT")
            self.host, self.port = m.group(1), int(m.group(2))
            return
        model = a.model
        self.tmp = tempfile.mkdtemp(prefix="offgrid_soak_")
        if not model:
            model = os.path.join(self.tmp, "tiny.gguf")
            subprocess.run([a.binary, "gen-model", "--preset", "tiny", "-o", model], check=True, stdout=subprocess.DEVNULL)
        self.log_path = os.path.join(self.tmp, "server.log")
        log = open(self.log_path, "w")
        cmd = [a.binary, "serve", "-m", model, "--port", "0", "--quiet", "--max-body", str(a.max_body)] + a.server_args
        self.proc = subprocess.Popen(cmd, stderr=log, stdout=subprocess.DEVNULL)
        self.pid = self.proc.pid
        for _ in range(600):
            m = re.search(r"listening on http://([0-9.]+):(\d+)", open(self.log_path).read())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                return
            if self.proc.poll() is not None:
                sys.exit("the server exited at start:\n" + open(self.log_path).read())
            time.sleep(0.1)
        sys.exit("the server did not start within 60 s")

    def request(self, method, path, body=None, timeout=30):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers={"Content-Type": "application/json"} if body is not None else {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    # ------------------------------------------------------------------ load
    def agent(self):
        a = self.a
        seed = 1
        while not self.stop.is_set():
            cmd = [a.binary, "bench-serve", "--url", f"http://{self.host}:{self.port}", "--workload", "agent",
                   "-c", str(a.sessions), "--turns", str(a.turns), "--system-tokens", str(a.system_tokens),
                   "--tool-tokens", a.tool_tokens, "--reply-tokens", a.reply_tokens, "--seed", str(seed), "--json"]
            seed += 1
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            while proc.poll() is None and not self.stop.is_set():
                time.sleep(0.2)
            if proc.poll() is None:  # time is up: this round is not counted
                proc.terminate()
                proc.communicate()
                return
            out, err = proc.communicate()
            try:
                rep = json.loads(out)
            except ValueError:
                self.count("agent_requests_failed", 1, "bench-serve: " + (err or out)[-300:])
                time.sleep(1)
                continue
            self.count("agent_rounds")
            self.count("agent_requests_ok", rep.get("ok", 0))
            if rep.get("failed", 0):
                self.count("agent_requests_failed", rep["failed"], "agent: " + rep.get("first_error", ""))

    def vanisher(self, k):
        rnd = random.Random(k)
        while not self.stop.is_set():
            body = json.dumps({"model": self.model_id, "prompt": "vanishing client %d" % rnd.randrange(1 << 30),
                               "max_tokens": 64, "stream": True, "temperature": 0})
            try:
                s = socket.create_connection((self.host, self.port), timeout=30)
                s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
                got = b""
                while b"data: {" not in got:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                if rnd.random() < 0.5:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
                s.close()
                self.count("vanished")
            except OSError as e:
                self.count("unexpected_status", 1, "vanisher: %s" % e)
            time.sleep(rnd.random() * 0.5)

    def idler(self):
        held = []
        while not self.stop.is_set():
            held = [s for s in held if self.alive(s)]
            while len(held) < self.a.idle and not self.stop.is_set():
                try:
                    s = socket.create_connection((self.host, self.port), timeout=5)
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
                    s.setblocking(False)
                    held.append(s)
                    self.count("idle_opened")
                except OSError as e:
                    self.count("unexpected_status", 1, "idler: %s" % e)
                    break
            time.sleep(0.5)
        for s in held:
            s.close()

    def alive(self, s):
        # Still waiting: nothing to read. Anything else (the server's 400 after its read timeout, a close, a reset)
        # means the server let the connection go.
        try:
            s.recv(4096)
        except BlockingIOError:
            return True
        except OSError:
            pass
        s.close()
        self.count("idle_dropped")
        return False

    def raw(self, data, timeout=30):
        s = socket.create_connection((self.host, self.port), timeout=timeout)
        try:
            try:
                s.sendall(data)
            except OSError:
                pass  # a refusal may close the connection before the body is sent: its status is still there
            got = b""
            while b"\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            m = re.match(rb"HTTP/1\.[01] (\d{3})", got)
            return int(m.group(1)) if m else 0
        finally:
            s.close()

    def refusals(self):
        rnd = random.Random(7)
        big = b'{"model": "m", "prompt": "' + b"x" * (self.a.max_body + 16) + b'"}'
        cases = [
            (lambda: self.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: %d\r\n\r\n" % len(big) + big), {413}),
            (lambda: self.request("POST", "/v1/chat/completions", b'{"model": "m", "messages": [')[0], {400}),
            (lambda: self.request("POST", "/v1/completions", b'{"model": 5, "prompt": "x"}')[0], {400}),
            (lambda: self.request("POST", "/v1/completions", b'{"prompt": "\xff\xfe"}')[0], {400}),
            (lambda: self.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}"),
             {400}),
            (lambda: self.raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                              b"Content-Length: 3\r\n\r\n0\r\n\r\n"), {400}),
            (lambda: self.request("POST", "/v1/completions", bytes(rnd.randrange(256) for _ in range(200)))[0], {400}),
        ]
        while not self.stop.is_set():
            fn, want = cases[rnd.randrange(len(cases))]
            try:
                status = fn()
            except OSError as e:
                status = "error: %s" % e
            self.count("refusals")
            if status not in want:
                self.count("unexpected_status", 1, "refusal: got %s, want %s" % (status, sorted(want)))
            time.sleep(0.2)

    def monitor(self, t0):
        while not self.stop.is_set():
            t = time.time()
            try:
                status, _ = self.request("GET", "/health", timeout=2)
                if status == 200:
                    self.count("health_ok")
                else:
                    self.count("health_failed", 1, "/health: HTTP %d" % status)
            except OSError as e:
                self.count("health_failed", 1, "/health: %s" % e)
            with self.lock:
                self.health_ms.append(1000 * (time.time() - t))
            if self.pid:
                try:
                    kb = int(re.search(r"VmRSS:\s+(\d+)", open("/proc/%d/status" % self.pid).read()).group(1))
                    with self.lock:
                        self.rss.append((time.time() - t0, kb / 1024.0))
                except (OSError, AttributeError):
                    pass
            self.stop.wait(max(0.0, 1.0 - (time.time() - t)))

    # ------------------------------------------------------------------ run
    def run(self):
        self.start()
        status, body = self.request("GET", "/v1/models")
        self.model_id = json.loads(body)["data"][0]["id"]
        t0 = time.time()
        threads = [threading.Thread(target=self.agent), threading.Thread(target=self.idler),
                   threading.Thread(target=self.refusals), threading.Thread(target=self.monitor, args=(t0,))]
        threads += [threading.Thread(target=self.vanisher, args=(k,)) for k in range(self.a.vanishers)]
        for t in threads:
            t.start()
        while time.time() - t0 < self.a.duration:
            if self.proc and self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop.set()
        for t in threads:
            t.join()
        return self.report(time.time() - t0)

    def report(self, wall):
        died = bool(self.proc and self.proc.poll() is not None)
        failed_metric = None
        if not died:
            try:
                _, text = self.request("GET", "/metrics")
                m = re.search(rb"\noffgrid_requests_failed_total ([0-9.e+]+)", text)
                failed_metric = float(m.group(1)) if m else None
            except OSError:
                pass
        rss = [mb for _, mb in self.rss]
        q = len(rss) // 4
        growth = None
        if q >= 1:
            growth = statistics.median(rss[3 * q:]) - statistics.median(rss[q:2 * q])
        hm = sorted(self.health_ms)
        rep = dict(self.counts)
        rep.update({
            "wall_s": round(wall, 1), "server_died": died, "requests_failed_metric": failed_metric,
            "rss_mb": {"first": rss[0] if rss else None, "max": max(rss) if rss else None,
                       "last": rss[-1] if rss else None, "growth_after_warmup": growth,
                       "samples": len(rss)},
            "health_ms": {"p50": hm[len(hm) // 2] if hm else None, "max": hm[-1] if hm else None},
            "errors": self.errors,
        })
        bad = []
        if rep["agent_requests_failed"]:
            bad.append("well-formed requests failed")
        if rep["health_failed"]:
            bad.append("/health failed")
        if rep["unexpected_status"]:
            bad.append("unexpected statuses")
        if died:
            bad.append("the server died")
        if growth is not None and growth > self.a.rss_growth_mb:
            bad.append("RSS grew by %.1f MiB after warm-up" % growth)
        if rep["agent_rounds"] == 0 and rep["agent_requests_ok"] == 0:
            bad.append("no agent request completed")
        rep["problems"] = bad
        if self.proc:
            if not died:
                self.proc.terminate()
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            rep["server_exit"] = self.proc.returncode
        return rep


def main():
    a = parse_args()
    rep = Soak(a).run()
    print(json.dumps(rep, indent=2))
    return 1 if rep["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
