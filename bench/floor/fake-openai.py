#!/usr/bin/env python3
"""A local OpenAI-compatible server for bench/footprint: POST /v1/chat/completions answers a
streamed (SSE) "ok" in the real chunk format, keep-alive HTTP/1.1. Prints its port, then serves
until killed."""
import http.server
import json
import socketserver
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
                "model": request.get("model", "bench")}
        if not request.get("stream"):
            body = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
                               "model": base["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": "ok"}}],
                               "usage": {"prompt_tokens": 5, "completion_tokens": 1,
                                         "total_tokens": 6}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        chunks = [
            dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": "ok"},
                                 "finish_reason": None}]),
            dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}],
                 usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}),
        ]
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        body = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
sys.stdout.close()
server.serve_forever()
