"""A small HTTP front that speaks the subset of Qdrant's REST API Warren's qdrant memory
backend calls, over Qdrant's own engine (the `qdrant-edge-py` package: the Qdrant segment,
filter, payload-index and scoring code, in process). This file only translates JSON to the
engine's types and back; every match, filter, ordering and score comes from the engine.

Started by warren_testkit::qdrant::QdrantEngine. Prints `listening on <port>` when ready.

Routes (Qdrant's paths and shapes):
  GET    /healthz, GET /
  GET    /collections/{c}            PUT /collections/{c}        DELETE /collections/{c}
  PUT    /collections/{c}/index
  PUT    /collections/{c}/points                (upsert)
  POST   /collections/{c}/points/delete         (points or filter)
  POST   /collections/{c}/points/payload        (set payload: points or filter)
  POST   /collections/{c}/points/scroll | query | count
"""

import argparse
import json
import os
import re
import shutil
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import qdrant_edge as qe

LOCK = threading.Lock()
SHARDS = {}
DIMS = {}
ARGS = None


class Bad(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def condition(c):
    if "must" in c or "should" in c or "must_not" in c:
        return filt(c)
    if "has_id" in c:
        return qe.HasIdCondition(set(point_id(i) for i in c["has_id"]))
    if "is_empty" in c:
        return qe.IsEmptyCondition(c["is_empty"]["key"])
    if "is_null" in c:
        return qe.IsNullCondition(c["is_null"]["key"])
    key = c.get("key")
    if key is None:
        raise Bad(400, "condition without key: %r" % (c,))
    if "match" in c:
        m = c["match"]
        if "value" in m:
            match = qe.MatchValue(m["value"])
        elif "any" in m:
            match = qe.MatchAny(m["any"])
        elif "except" in m:
            match = qe.MatchExcept(m["except"])
        elif "text_any" in m:
            match = qe.MatchTextAny(m["text_any"])
        elif "text" in m:
            match = qe.MatchText(m["text"])
        elif "phrase" in m:
            match = qe.MatchPhrase(m["phrase"])
        else:
            raise Bad(400, "unsupported match %r" % (m,))
        return qe.FieldCondition(key, match=match)
    if "range" in c:
        r = c["range"]
        return qe.FieldCondition(
            key, range=qe.RangeFloat(gte=r.get("gte"), gt=r.get("gt"), lte=r.get("lte"), lt=r.get("lt"))
        )
    raise Bad(400, "unsupported condition %r" % (c,))


def filt(f):
    if f is None:
        return None
    conds = lambda k: [condition(x) for x in f[k]] if f.get(k) else None
    return qe.Filter(must=conds("must"), should=conds("should"), must_not=conds("must_not"))


def point_id(i):
    if isinstance(i, int):
        return i
    try:
        return uuid.UUID(str(i))
    except ValueError:
        raise Bad(400, "Unable to parse UUID: %s" % i)


def out_id(i):
    return str(i) if isinstance(i, uuid.UUID) else i


def record(r, score=None):
    out = {"id": out_id(r.id), "payload": r.payload or {}}
    if score is not None:
        out["score"] = score
        out["version"] = r.version
    return out


def shard(c):
    s = SHARDS.get(c)
    if s is None:
        raise Bad(404, "Not found: Collection `%s` doesn't exist!" % c)
    return s


def path_of(c):
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,255}", c):
        raise Bad(400, "bad collection name")
    return os.path.join(ARGS.data, c)


def schema_of(s):
    if isinstance(s, dict):
        s = s.get("type")
    table = {
        "keyword": qe.PayloadSchemaType.Keyword,
        "integer": qe.PayloadSchemaType.Integer,
        "float": qe.PayloadSchemaType.Float,
        "bool": qe.PayloadSchemaType.Bool,
        "datetime": qe.PayloadSchemaType.Datetime,
        "uuid": qe.PayloadSchemaType.Uuid,
    }
    if s == "text":
        return qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, lowercase=True)
    if s not in table:
        raise Bad(400, "unsupported field_schema %r" % (s,))
    return table[s]


def handle(method, path, query, body):
    parts = [p for p in path.split("/") if p]
    if method == "GET" and parts in ([], ["healthz"]):
        if not parts:
            return {"title": "qdrant - vector search engine", "version": "edge-py"}
        return "healthz check passed"
    if len(parts) < 2 or parts[0] != "collections":
        raise Bad(404, "no route %s %s" % (method, path))
    c = parts[1]
    rest = parts[2:]
    if not rest:
        if method == "GET":
            s = shard(c)
            info = s.info()
            return {
                "status": "green",
                "points_count": info.points_count,
                "config": {"params": {"vectors": {"size": DIMS[c], "distance": "Cosine"}}},
                "payload_schema": {k: {"points": v.points} for k, v in info.payload_schema.items()},
            }
        if method == "PUT":
            if c in SHARDS:
                raise Bad(409, "Wrong input: Collection `%s` already exists!" % c)
            v = body.get("vectors") or {}
            if v.get("distance") != "Cosine" or not isinstance(v.get("size"), int):
                raise Bad(400, "this front supports vectors {size, distance: Cosine} only")
            config = qe.EdgeConfig(vectors=qe.EdgeVectorParams(size=v["size"], distance=qe.Distance.Cosine))
            p = path_of(c)
            SHARDS[c] = qe.EdgeShard.create(p, config)
            DIMS[c] = v["size"]
            return True
        if method == "DELETE":
            s = SHARDS.pop(c, None)
            if s is not None:
                s.close()
                shutil.rmtree(path_of(c), ignore_errors=True)
            return s is not None
    s = shard(c)
    if rest == ["index"] and method == "PUT":
        s.update(qe.UpdateOperation.create_field_index(body["field_name"], schema_of(body["field_schema"])))
        return {"operation_id": 0, "status": "completed"}
    if rest == ["points"] and method == "PUT":
        points = []
        for p in body["points"]:
            vec = p["vector"]
            if len(vec) != DIMS[c]:
                raise Bad(400, "Wrong input: Vector dimension error: expected dim: %d, got %d" % (DIMS[c], len(vec)))
            points.append(qe.Point(point_id(p["id"]), vec, p.get("payload") or {}))
        s.update(qe.UpdateOperation.upsert_points(points))
        return {"operation_id": 0, "status": "completed"}
    if rest == ["points", "delete"] and method == "POST":
        if "points" in body:
            s.update(qe.UpdateOperation.delete_points([point_id(i) for i in body["points"]]))
        else:
            s.update(qe.UpdateOperation.delete_points_by_filter(filt(body["filter"])))
        return {"operation_id": 0, "status": "completed"}
    if rest == ["points", "payload"] and method == "POST":
        if "points" in body:
            s.update(qe.UpdateOperation.set_payload([point_id(i) for i in body["points"]], body["payload"]))
        else:
            s.update(qe.UpdateOperation.set_payload_by_filter(filt(body["filter"]), body["payload"]))
        return {"operation_id": 0, "status": "completed"}
    if rest == ["points", "scroll"] and method == "POST":
        offset = body.get("offset")
        req = qe.ScrollRequest(
            offset=point_id(offset) if offset is not None else None,
            limit=body.get("limit", 10),
            filter=filt(body.get("filter")),
            with_payload=body.get("with_payload", True),
            with_vector=False,
        )
        records, nxt = s.scroll(req)
        return {"points": [record(r) for r in records], "next_page_offset": out_id(nxt) if nxt is not None else None}
    if rest == ["points", "query"] and method == "POST":
        q = body.get("query")
        if isinstance(q, list):
            query = qe.Query.Nearest(q)
        elif isinstance(q, dict) and "order_by" in q:
            ob = q["order_by"]
            if isinstance(ob, str):
                ob = {"key": ob}
            direction = qe.Direction.Desc if ob.get("direction") == "desc" else qe.Direction.Asc
            query = qe.OrderBy(ob["key"], direction=direction)
        else:
            raise Bad(400, "this front supports a dense vector or order_by query only")
        req = qe.QueryRequest(
            limit=body.get("limit", 10),
            offset=body.get("offset"),
            query=query,
            filter=filt(body.get("filter")),
            with_payload=body.get("with_payload", True),
            with_vector=False,
            score_threshold=body.get("score_threshold"),
        )
        return {"points": [record(r, r.score) for r in s.query(req)]}
    if rest == ["points", "count"] and method == "POST":
        return {"count": s.count(qe.CountRequest(exact=True, filter=filt(body.get("filter"))))}
    raise Bad(404, "no route %s %s" % (method, path))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Replies go out at once (no Nagle wait for the client's delayed ACK: 40 ms a request).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, status, value):
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def any(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        open_path = self.path in ("/healthz", "/livez", "/readyz")  # as Qdrant: no key needed
        if ARGS.api_key and not open_path and self.headers.get("api-key") != ARGS.api_key:
            self.reply(401, {"status": {"error": "Must provide an API key or an Authorization bearer token"}})
            return
        path, _, query = self.path.partition("?")
        try:
            body = json.loads(raw) if raw else {}
            with LOCK:
                result = handle(self.command, path, query, body)
            if isinstance(result, str):
                data = result.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.reply(200, {"result": result, "status": "ok", "time": 0.0})
        except Bad as e:
            self.reply(e.status, {"status": {"error": str(e)}, "time": 0.0})
        except Exception as e:  # the engine's own errors, as Qdrant reports them
            self.reply(400, {"status": {"error": "Wrong input: %s" % e}, "time": 0.0})

    do_GET = do_PUT = do_POST = do_DELETE = any


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--api-key", default=None)
    ARGS = ap.parse_args()
    os.makedirs(ARGS.data, exist_ok=True)
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    print("listening on %d" % server.server_address[1], flush=True)
    # The test process holds our stdin: when it ends (even killed), stdin closes and so do we.
    def watch():
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
