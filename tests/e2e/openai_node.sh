#!/usr/bin/env bash
# Runs tests/e2e/openai-node/check.mjs (the official OpenAI Node client, pinned in its
# package-lock.json) against a real `detaudit serve` on 127.0.0.1 with a free port.
# Usage: openai_node.sh DETAUDIT_BIN MODEL.gguf
set -euo pipefail
bin=$1 model=$2
# A missing public fixture is a skipped test (CTest's SKIP_RETURN_CODE 77), never a pass.
[ -f "$model" ] || { echo "SKIPPED: public fixture $model is not available (scripts/fixtures.sh downloads it)" >&2; exit 77; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ -d "$here/openai-node/node_modules/openai" ] ||
  { echo "openai-node: node_modules missing; scripts/setup.sh installs them (npm ci)" >&2; exit 1; }
log=$(mktemp)
"$bin" serve -m "$model" -np 2 --chat-template chatml --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$log" | head -1)
[ -n "$url" ] || { echo "serve did not start:"; cat "$log"; exit 1; }
node "$here/openai-node/check.mjs" "$url"
kill -TERM $pid
wait $pid
