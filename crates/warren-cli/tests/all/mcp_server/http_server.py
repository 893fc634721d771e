"""A streamable HTTP MCP server for Warren's tests (issue 23), on the official `mcp` package.

Run as `http_server.py PORT`; it listens on 127.0.0.1:PORT at /mcp. Tools: echo, auth_sha256
(the SHA-256 of the request's Authorization header), auth (the header itself: a careless
server echoing a credential). Each request's Authorization header is also appended to the
file named by WARREN_TEST_SEEN, so the test sees what reached the server.
"""

import hashlib
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("warren-http-test")


def authorization(ctx: Context) -> str:
    request = ctx.request_context.request
    return request.headers.get("authorization", "") if request is not None else ""


@server.tool()
def echo(text: str) -> str:
    """Answers with the text it was given."""
    return f"echo: {text}"


@server.tool()
def auth_sha256(ctx: Context) -> str:
    """The SHA-256 (hex) of the Authorization header this request carried."""
    value = authorization(ctx)
    seen = os.environ.get("WARREN_TEST_SEEN")
    if seen:
        with open(seen, "a") as f:
            f.write(value + "\n")
    return hashlib.sha256(value.encode()).hexdigest()


@server.tool()
def auth(ctx: Context) -> str:
    """The Authorization header this request carried."""
    return authorization(ctx)


if __name__ == "__main__":
    import anyio

    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[1])))
