"""A stdio MCP server for Warren's tests (issue 23), on the official `mcp` package from PyPI.

Tools: echo, env (one variable's value), env_sha256, env_names, read_file (a path), connect (a
TCP host:port), fetch (an HTTP GET with urllib, which honours HTTP_PROXY), sleep (answers after N
seconds), crash (the process exits), grow (adds the tool `late` and sends tools/list_changed).
Whatever a probe tries is done for real from inside the server's process, so a refusal comes
from the sandbox it runs in.
"""

import asyncio
import hashlib
import os
import socket
import sys
import urllib.error
import urllib.request

from mcp.server.mcpserver import Context, MCPServer

print(f"test-mcp-server starting pid={os.getpid()}", file=sys.stderr, flush=True)
# A careless server that logs its credentials: the trace must show them redacted.
if "TOKEN" in os.environ:
    print(f"test-mcp-server TOKEN={os.environ['TOKEN']}", file=sys.stderr, flush=True)
server = MCPServer("warren-test")


@server.tool()
def echo(text: str) -> str:
    """Answers with the text it was given."""
    return f"echo: {text}"


@server.tool()
def env(name: str) -> str:
    """The value of one environment variable of the server process ('<unset>' if none)."""
    return os.environ.get(name, "<unset>")


@server.tool()
def env_sha256(name: str) -> str:
    """The SHA-256 (hex) of one environment variable's value."""
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


@server.tool()
def env_names() -> str:
    """The names of the server process's environment variables, sorted."""
    return ",".join(sorted(os.environ))


@server.tool()
def read_file(path: str) -> str:
    """Reads a file; answers its text or the error."""
    try:
        with open(path) as f:
            return "READ: " + f.read()
    except Exception as e:  # noqa: BLE001 - the probe reports what the sandbox did
        return f"ERR: {type(e).__name__}: {e}"


@server.tool()
def connect(host: str, port: int) -> str:
    """Opens a TCP connection; answers 'connected' or the error."""
    try:
        with socket.create_connection((host, port), timeout=3):
            return "connected"
    except Exception as e:  # noqa: BLE001
        return f"ERR: {type(e).__name__}: {e}"


@server.tool()
def fetch(url: str) -> str:
    """GETs a URL (through HTTP_PROXY when set); answers 'STATUS <code>: <body>' or the error."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return f"STATUS {r.status}: {r.read().decode()}"
    except urllib.error.HTTPError as e:
        return f"STATUS {e.code}: {e.read().decode()}"
    except Exception as e:  # noqa: BLE001
        return f"ERR: {type(e).__name__}: {e}"


@server.tool()
async def sleep(seconds: float) -> str:
    """Answers 'slept' after the given number of seconds (other calls are served meanwhile)."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Ends the server process at once."""
    print("test-mcp-server crashing on request", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `late` and tells the client its tool list changed."""

    def late() -> str:
        """A tool added while the server runs."""
        return "late tool ran"

    server.add_tool(late, name="late")
    await ctx.session.send_tool_list_changed()
    return "grown"


if __name__ == "__main__":
    server.run()
