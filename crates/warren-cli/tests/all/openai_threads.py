"""The official `openai` Python client holding many conversations through one key (issue 37 §2).

Run by `openai_threads.rs`, which starts the daemon with the fake OpenAI server as the agent's
provider (each reply keyed by the text of the turn's input, each taking about a second).
Usage:

    openai_threads.py BASE_URL TOKEN

No `user`, no `X-Warren-Session`: as OpenAI's API, every request carries its conversation. Prints
one JSON line with the session keys the Rust test inspects. Any failed check raises.
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai

base_url, token = sys.argv[1:3]
client = openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=60)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def ask(messages, stream=False, **extra):
    """One completion: (reply text, session header)."""
    if stream:
        with client.chat.completions.with_streaming_response.create(
                model="main", messages=messages, stream=True, **extra) as raw:
            session = raw.headers.get("x-warren-session")
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
            return text, session
    raw = client.chat.completions.with_raw_response.create(model="main", messages=messages, **extra)
    return raw.parse().choices[0].message.content, raw.headers.get("x-warren-session")


# 12 unrelated conversations at once through one key: 12 sessions, none refused (429).
def first(i):
    return ask([{"role": "user", "content": f"parallel-{i:02}"}])


with ThreadPoolExecutor(max_workers=12) as pool:
    results = list(pool.map(first, range(12)))
for i, (text, session) in enumerate(results):
    check(text == f"Parallel reply {i}.", f"conversation {i}: {text!r}")
parallel = [s for _, s in results]
check(len(set(parallel)) == 12, f"sessions: {parallel}")

# One conversation continued by resending it in full (as `llm --cid` and chat UIs do): one
# session, no 409. The second turn is streamed and its streamed text resent as the reply.
conversation, sessions = [], []
# The client's token caps reach the provider (the Rust test reads the provider's requests).
caps = {"thread-one": {}, "thread-two": {"max_tokens": 7}, "thread-three": {"max_completion_tokens": 9}}
for question, stream in [("thread-one", False), ("thread-two", True), ("thread-three", False)]:
    conversation.append({"role": "user", "content": question})
    text, session = ask(conversation, stream=stream, **caps[question])
    sessions.append(session)
    conversation.append({"role": "assistant", "content": text})
check(len(set(sessions)) == 1, f"one conversation, sessions: {sessions}")
check([m["content"] for m in conversation if m["role"] == "assistant"]
      == ["Answer one.", "Answer two.", "Answer three."], f"replies: {conversation}")

# An edited earlier message: a new conversation in a new session, not 409.
edited = [dict(m) for m in conversation[:2]] + [{"role": "user", "content": "thread-edited"}]
edited[0]["content"] = "thread-one, edited"
text, branch = ask(edited)
check(text == "Edited answer.", f"edited: {text!r}")
check(branch != sessions[0] and branch not in parallel, f"edited went to {branch}")

print(json.dumps({"parallel": parallel, "thread": sessions[0], "branch": branch,
                  "openai_version": openai.__version__}))
