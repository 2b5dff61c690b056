#!/usr/bin/env python3
"""Reuse to the token: pairs of chats with the same system prompt, sent one after the other to a running
`offgrid serve`; for each pair, the second chat's `cached_tokens` against the tokens the two rendered prompts
share (their common prefix by `/tokenize`, which equals the server's rendering when the vocabulary has no ChatML
control tokens, as the generated models' byte-level one).

    python3 scripts/reuse_measure.py http://127.0.0.1:8080 [SYSTEM_PROMPT_CHARACTERS]

Prints a Markdown table: the user messages of each pair differ from their first token, share their first 300
characters, or the second extends the first.
"""
import json
import random
import sys
import urllib.request

url = sys.argv[1].rstrip("/")
system_chars = int(sys.argv[2]) if len(sys.argv) > 2 else 1500


def post(path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=3600))


WORDS = "tool call json read file grep the agent plan step result edit".split()


def text(n, seed):
    rnd = random.Random(seed)
    out = ""
    while len(out) < n:
        out += (" " if out else "") + rnd.choice(WORDS)
    return out[:n]


def render(msgs):
    return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in msgs) + "<|im_start|>assistant\n"


def tokens(t):
    return post("/tokenize", {"content": t})["tokens"]


model = json.load(urllib.request.urlopen(url + "/v1/models"))["data"][0]["id"]
shared_user = text(300, 77)
cases = [("differ from their first token", "A " + text(400, 5), "B " + text(300, 6)),
         ("share their first 300 characters", shared_user + " alpha", shared_user + " beta"),
         ("the second extends the first", "same", "same question, longer")]
print("| the two user messages | system prompt | tokens shared by the two prompts | second chat's prompt | cached "
      "| of the system prompt | of the shared tokens |")
print("|---|---:|---:|---:|---:|---:|---:|")
for k, (name, user_a, user_b) in enumerate(cases):
    system = text(system_chars + 37 * k, 1000 + k)  # a system prompt of its own for each pair
    a = [("system", system), ("user", user_a)]
    b = [("system", system), ("user", user_b)]
    for msgs in (a, b):
        reply = post("/v1/chat/completions", {"model": model, "messages": [{"role": r, "content": c} for r, c in msgs],
                                              "max_tokens": 2, "temperature": 0})
    ta, tb = tokens(render(a)), tokens(render(b))
    n_system = len(tokens(f"<|im_start|>system\n{system}<|im_end|>\n"))
    shared = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    usage = reply["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    print(f"| {name} | {n_system} | {shared} | {usage['prompt_tokens']} | {cached} "
          f"| {100 * min(cached, n_system) / n_system:.1f} % | {100 * cached / shared:.1f} % |")
