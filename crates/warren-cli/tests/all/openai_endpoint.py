"""The official `openai` Python client against a live `warren daemon` (issue 27).

Run by `openai_endpoint.rs`, which starts the daemon with the fake OpenAI server as the agents'
provider and queues the fake's replies in the order used here. Usage:

    openai_endpoint.py BASE_URL TOKEN REVOKED_TOKEN

Prints one JSON line: the session keys the Rust test inspects afterwards. Any failed check
raises (non-zero exit, with the traceback on stderr).
"""

import json
import sys

import openai

base_url, token, revoked = sys.argv[1:4]
client = openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=30)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


# The models: one per agent, id = alias.
models = sorted(m.id for m in client.models.list())
check(models == ["helper", "main"], f"models: {models}")
check(client.models.retrieve("main").owned_by == "warren", "retrieve main")

# Non-streaming, session derived from the token, `user` and the model.
raw = client.chat.completions.with_raw_response.create(
    model="main",
    messages=[{"role": "user", "content": "Say hello"}],
    user="alice",
)
plain_session = raw.headers.get("x-warren-session")
done = raw.parse()
check(done.object == "chat.completion", f"object: {done.object}")
check(done.model == "main", f"model: {done.model}")
check(done.choices[0].message.role == "assistant", "role")
check(done.choices[0].message.content == "Hello from the fake.", f"reply: {done.choices[0].message.content!r}")
check(done.choices[0].finish_reason == "stop", f"finish: {done.choices[0].finish_reason}")
check(done.usage.prompt_tokens == 10 and done.usage.completion_tokens == 5, f"usage: {done.usage}")
check(done.usage.total_tokens == 15, f"total: {done.usage}")
check(plain_session and plain_session.startswith("oai-"), f"session header: {plain_session}")

# Streaming with usage in the final chunk; another `user` = another session.
stream = client.chat.completions.create(
    model="main",
    messages=[{"role": "system", "content": "ignored: the agent's prompt is Warren's"},
              {"role": "user", "content": "Stream please"}],
    user="bob",
    stream=True,
    stream_options={"include_usage": True},
)
text, finish, usage, chunks = "", None, None, 0
for chunk in stream:
    chunks += 1
    check(chunk.object == "chat.completion.chunk", f"chunk object: {chunk.object}")
    if chunk.usage is not None:
        check(chunk.choices == [], "the usage chunk has no choices")
        usage = chunk.usage
        continue
    choice = chunk.choices[0]
    text += choice.delta.content or ""
    finish = choice.finish_reason or finish
check(text == "Streamed reply.", f"streamed text: {text!r}")
check(finish == "stop", f"finish: {finish}")
check(usage is not None and usage.prompt_tokens == 10 and usage.completion_tokens == 5, f"usage: {usage}")
check(chunks >= 4, f"chunks: {chunks}")

# A multi-turn conversation, resent in full each time, in its own session (header).
headers = {"X-Warren-Session": "oai-multi"}
conversation = []
for question, answer in [("one", "Answer one."), ("two", "Answer two."), ("three", "Answer three.")]:
    conversation.append({"role": "user", "content": question})
    reply = client.chat.completions.create(model="main", messages=conversation, extra_headers=headers)
    got = reply.choices[0].message.content
    check(got == answer, f"turn {question}: {got!r}")
    conversation.append({"role": "assistant", "content": got})

# A resent history that diverges from the stored one: 409 naming the first differing index.
edited = [dict(m) for m in conversation] + [{"role": "user", "content": "four"}]
edited[2]["content"] = "TWO (edited)"
try:
    client.chat.completions.create(model="main", messages=edited, extra_headers=headers)
    raise AssertionError("an edited history was accepted")
except openai.ConflictError as e:
    check(e.status_code == 409, f"status {e.status_code}")
    check(e.body["code"] == "history_mismatch", f"body: {e.body}")
    check("messages[2]" in e.body["message"], f"message: {e.body['message']}")

# The Responses API (small): a string input, one response; `user` picks the session as above.
resp = client.responses.create(model="main", input="Respond please", user="carol")
check(resp.object == "response" and resp.status == "completed", f"response: {resp}")
check(resp.output_text == "Responded.", f"output_text: {resp.output_text!r}")
check(resp.usage.input_tokens == 10 and resp.usage.output_tokens == 5, f"usage: {resp.usage}")

# The session belongs to agent main: another agent is refused by the turn door.
try:
    client.chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "x"}], extra_headers=headers)
    raise AssertionError("another agent's session was accepted")
except openai.ConflictError as e:
    check(e.body["code"] == "session_owned_by_other_agent", f"body: {e.body}")

# Client tools are refused: the agent's tools are Warren's.
try:
    client.chat.completions.create(
        model="main",
        messages=[{"role": "user", "content": "x"}],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    )
    raise AssertionError("client tools were accepted")
except openai.BadRequestError as e:
    check(e.body["param"] == "tools", f"body: {e.body}")

# An unknown model.
try:
    client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an unknown model was accepted")
except openai.NotFoundError as e:
    check(e.body["code"] == "model_not_found", f"body: {e.body}")
    check(e.body["type"] == "not_found_error", f"body: {e.body}")

# A revoked token.
revoked_client = openai.OpenAI(base_url=base_url, api_key=revoked, max_retries=0, timeout=30)
for call in (lambda: revoked_client.models.list(),
             lambda: revoked_client.chat.completions.create(
                 model="main", messages=[{"role": "user", "content": "x"}])):
    try:
        call()
        raise AssertionError("a revoked token was accepted")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"status {e.status_code}")
        check(e.body["code"] == "invalid_api_key", f"body: {e.body}")

# A retried request: the SDK gives up on the first attempt (its 3 s timeout) and resends the same
# body (`x-stainless-retry-count: 1`) while that attempt's turn still runs (about 5 s). The
# retry joins that turn: its answer, one provider request, the message stored once (the Rust
# test reads session oai-retry). Last, so a reply the fake keeps for a second run stays unused.
retrying = openai.OpenAI(base_url=base_url, api_key=token, max_retries=2, timeout=3.0)
raw = retrying.chat.completions.with_raw_response.create(
    model="main",
    messages=[{"role": "user", "content": "take your time"}],
    extra_headers={"X-Warren-Session": "oai-retry"},
)
check(raw.retries_taken >= 1, f"the first attempt did not time out: {raw.retries_taken} retries")
got = raw.parse().choices[0].message.content
check(got == "Slow and steady.", f"retried reply: {got!r}")

print(json.dumps({"plain_session": plain_session, "multi_session": "oai-multi",
                  "openai_version": openai.__version__}))
