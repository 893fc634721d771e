# Shared by bench/health-wrk and bench/idle-rss: builds the release `warren`, starts a daemon
# with 3 agents on a free port in a temporary root and pairs a token. Sets: bin, work, root,
# port, base, daemon, token. The caller's EXIT trap must call stop_daemon.
build_and_start_daemon() {
  cargo build -q --release -p warren-cli --bin warren
  bin="${CARGO_TARGET_DIR:-target}/release/warren"
  work="$(mktemp -d)"
  root="$work/warren"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  mkdir -p "$root"
  printf '[agents.main]\n[agents.ops]\n[agents.research]\n\n[gateway]\nport = %s\n' "$port" > "$root/config.toml"
  "$bin" --config-dir "$root" daemon 2> "$work/daemon.log" &
  daemon=$!
  base="http://127.0.0.1:$port"
  for _ in $(seq 1 100); do curl -fs "$base/health" >/dev/null && break; sleep 0.1; done
  local code
  code="$("$bin" --config-dir "$root" pair --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["code"])')"
  token="$(curl -fs -X POST "$base/pair" -H 'content-type: application/json' \
    -d "{\"code\": \"$code\", \"device\": \"bench\"}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])')"
}

stop_daemon() {
  kill -TERM "$daemon" 2>/dev/null || true
  wait "$daemon" 2>/dev/null || true
  rm -rf "$work"
}
