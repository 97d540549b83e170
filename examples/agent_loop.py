#!/usr/bin/env python3
"""A runnable agent loop around noa: copy it, then plug your client into call_model().

Every turn:  noa project (the view to send) -> your model -> append the reply to the transcript
             -> if the reply called Compress: noa apply, append the panel as the tool result.

The transcript is OpenAI Chat Completions JSONL (one message per line) and is the only record
the host keeps: noa reads it every turn, keeps its own state in --state-dir and never writes
it. Here the "model" is a scripted stand-in and the tools are fake, so the loop runs offline:

    python3 examples/agent_loop.py --noa target/release/noa --turns 60 --limit 16000

Standard library only, Python 3.8+. Prints one summary line; exits non-zero if a request went
over the window or a noa command failed unexpectedly.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

# --- 1. THE MODEL CALL: replace this function with your client -------------------------------
# `view`: the chat messages `noa project` wrote; send them as `messages`, unchanged (the nudge,
# when there is one, is the last user message). `tools`: the tool definitions, noa's Compress
# included. Return the assistant message as a chat dict. With the OpenAI SDK, for example:
#     r = client.chat.completions.create(model=MODEL, messages=view, tools=tools)
#     return r.choices[0].message.model_dump(exclude_none=True)
# and keep r.usage.prompt_tokens for --input-tokens (see provider_count below).
_step = [0]


def call_model(view, tools):
    """Scripted stand-in: answers a noa nudge with Compress, otherwise does fake work."""
    _step[0] += 1
    n = _step[0]
    last = view[-1]
    ranges = ranges_from_nudge(last["content"]) if last["role"] == "user" else []
    if ranges:  # a nudge: compress every range it lists, in one call
        content = [{"startId": a, "endId": b, "summary": (
            f"Steps {a}-{b}: read the storage, cache and retry modules and ran their tests. "
            "The retry limit in src/retry.py was off by one; the fix is in and tests pass. "
            "The public schema is unchanged because clients depend on it.")} for a, b in ranges]
        return tool_call(f"cmp_{n}", "Compress", {"topic": f"work before step {n}",
                                                  "content": content})
    if n % 5 == 0:
        return {"role": "assistant", "content": f"Step {n}: this module looks consistent."}
    if n % 3 == 0:
        return tool_call(f"call_{n}", "Bash", {"command": f"pytest -q tests/test_{n % 7}.py"})
    return tool_call(f"call_{n}", "Read", {"path": f"src/module_{n % 11}.py"})


def tool_call(call_id, name, args):
    fn = {"name": name, "arguments": json.dumps(args)}
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": fn}]}


def ranges_from_nudge(text):
    """The (start, end) pairs a noa nudge offers. Its range lines start with two spaces,
    '  m00002–m00041  40 msgs  9.1K [...]' (lines marked PROTECTED are not on offer); a
    tier-2/3 nudge lists blocks instead ('  b3  12 msgs ...'): fold the oldest to the newest."""
    if not isinstance(text, str):
        return []
    ranges, blocks = [], []
    for line in text.splitlines():
        m = re.match(r"  (m\d+)–(m\d+)\s", line)
        if m and "PROTECTED" not in line:
            ranges.append(m.groups())
        b = re.match(r"  (b\d+)\s+\d+ msgs", line)
        if b:
            blocks.append(b.group(1))
    if not ranges and len(blocks) >= 2:
        ranges.append((blocks[0], blocks[-1]))
    return ranges


# --- 2. YOUR TOOLS: here fake ones whose output is made up, deterministically ----------------
def fn_tool(name, description, param):
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": {param: {"type": "string"}},
                           "required": [param]}}}


FAKE_TOOLS = [fn_tool("Read", "Read a file.", "path"), fn_tool("Bash", "Run a command.", "command")]


def run_fake_tool(name, args):
    seed = int(hashlib.sha256(json.dumps([name, args]).encode()).hexdigest()[:8], 16)
    if name == "Read":
        return "".join(f"{i + 1:4d}  def handler_{(seed >> i % 16) % 997}(request, retries="
                       f"{i % 5}):  # cache lookup, then index\n" for i in range(40 + seed % 40))
    return "".join(f"tests/test_{seed % 7}.py::case_{i} PASSED\n" for i in range(10 + seed % 20))


# --- 3. THE LOOP: keep this part ---------------------------------------------------------------
class Noa:
    """Runs noa; an exit code outside `ok` is a failure of the loop (reported at the end)."""

    def __init__(self, binary, state_dir, limit):
        self.binary, self.failures = binary, 0
        self.common = ["--limit", str(limit)] + (["--state-dir", state_dir] if state_dir else [])

    def run(self, *args, ok=(0,)):
        try:
            r = subprocess.run([self.binary, *args], capture_output=True, text=True,
                               env=dict(os.environ, NO_COLOR="1"))
        except OSError as e:
            sys.exit(f"cannot run {self.binary}: {e} (pass --noa PATH)")
        if r.returncode not in ok:
            self.failures += 1
            print(f"noa {args[0]} failed (exit {r.returncode}):\n{r.stderr}", file=sys.stderr)
        return r


def append(path, *messages):
    with open(path, "a", encoding="utf-8") as f:
        for m in messages:
            f.write(json.dumps(m, ensure_ascii=False) + "\n")


def provider_count(view, tools):
    """A simulated provider: 3.5 characters a token over the whole request (the view, whose
    system message holds the system prompt, plus the tool definitions). A real host passes what
    its provider returned instead: OpenAI usage.prompt_tokens, Anthropic usage.input_tokens +
    cache_read_input_tokens + cache_creation_input_tokens."""
    chars = sum(len(json.dumps(m, ensure_ascii=False)) for m in view) + len(json.dumps(tools))
    return int(chars / 3.5) + 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=60)
    p.add_argument("--limit", type=int, default=16000, help="the context window, in tokens")
    p.add_argument("--noa", default="noa", help="the noa binary (default: noa on PATH)")
    p.add_argument("--state-dir", help="noa's state (default: .noa/ beside the transcript)")
    p.add_argument("--transcript", help="chat JSONL transcript (default: in a new temp dir)")
    o = p.parse_args()
    path = o.transcript or os.path.join(tempfile.mkdtemp(prefix="noa-loop-"), "session.jsonl")
    noa = Noa(o.noa, o.state_dir, o.limit)

    # Once per session: noa's system-prompt block and its Compress tool definition.
    prompt = noa.run("prompt").stdout
    schema = noa.run("prompt", "--tool-schema", "--for", "chat").stdout
    if noa.failures:
        return 2
    tools = [json.loads(schema)] + FAKE_TOOLS
    if os.path.exists(path):  # an existing transcript is carried on, with fresh call ids
        _step[0] = sum(1 for _ in open(path, encoding="utf-8"))
    else:
        append(path, {"role": "system", "content": "You are a coding agent.\n\n" + prompt},
               {"role": "user", "content": "Task: the retry logic gives up one attempt early. "
                "Find out why and fix it. Do not change the public schema."})

    s = dict(turns=0, nudges=0, blocks=0, rejected=0, peak=0, over=0)
    input_tokens = None  # the provider's count of the previous request; none before the first
    for turn in range(1, o.turns + 1):
        extra = [] if input_tokens is None else ["--input-tokens", str(input_tokens)]
        r = noa.run("project", path, "--report", "json", *noa.common, *extra)
        if r.returncode != 0:
            break
        view = [json.loads(line) for line in r.stdout.splitlines()]
        report = json.loads(r.stderr.strip().splitlines()[-1])  # --report json: one line
        s["turns"] = turn
        s["peak"] = max(s["peak"], report["request"] * 100 // report["window"])
        s["over"] += report["request"] > report["window"]
        s["nudges"] += report["nudge"] is not None

        reply = call_model(view, tools)
        input_tokens = provider_count(view, tools)
        append(path, reply)
        for call in reply.get("tool_calls") or []:
            name, call_id = call["function"]["name"], call["id"]
            if name != "Compress":
                result = run_fake_tool(name, json.loads(call["function"]["arguments"]))
            else:  # noa reads the call from the transcript; its panel is the tool result
                a = noa.run("apply", path, "--call-id", call_id, *noa.common, ok=(0, 1))
                result = a.stdout.strip() or a.stderr.strip()
                if a.returncode == 0:
                    s["blocks"] += len(re.findall(r"^\s*b\d+\(T\d\)=", result, re.M))
                elif a.returncode == 1:  # rejected, the panel says why: an error result
                    s["rejected"] += 1  # (in Anthropic format: "is_error": true instead)
                    result = "Error: Compress was rejected; nothing changed.\n" + result
                print(f"turn {turn}: {result.splitlines()[0] if result else '?'}", file=sys.stderr)
            append(path, {"role": "tool", "tool_call_id": call_id, "content": result})
        if not reply.get("tool_calls"):  # the model ended its turn: the user speaks next
            append(path, {"role": "user", "content": "Good. Go on with the next module."})
        if noa.failures:
            break

    print(f"turns={s['turns']} nudges={s['nudges']} blocks_created={s['blocks']} "
          f"rejected_calls={s['rejected']} peak={s['peak']}% limit={o.limit} "
          f"over_window={s['over']} noa_failures={noa.failures} transcript={path}")
    return 1 if s["over"] or noa.failures else 0


if __name__ == "__main__":
    sys.exit(main())
