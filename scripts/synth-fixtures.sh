#!/usr/bin/env bash
# Writes the synthetic test models with `detaudit synth` and checks each against its recorded sha256.
#
#   scripts/synth-fixtures.sh DETAUDIT OUTDIR           write OUTDIR/models/synthetic/NAME.gguf for every
#                                                       line of tests/data/synthetic.list; exit 1 naming
#                                                       each file whose bytes differ from the list
#   scripts/synth-fixtures.sh --update DETAUDIT OUTDIR  the same, then rewrite the list's sha256 column
#                                                       (after a deliberate change to synth or a quantizer)
#
# The list is NAME|SHA256|SYNTH ARGUMENTS. The same options give the same bytes on every machine, so
# a hash that differs means synth, the GGUF writer or a quantizer changed its output. The test
# set-up runs this (CTest fixture "synthetic_models"); docs/fixtures.md lists every fixture.
set -euo pipefail

update=0
if [ "${1:-}" = --update ]; then update=1; shift; fi
case "${1:-}" in -h|--help|"") sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; [ -n "${1:-}" ]; exit ;; esac
[ $# -eq 2 ] || { echo "synth-fixtures.sh: usage: synth-fixtures.sh [--update] DETAUDIT OUTDIR" >&2; exit 2; }
bin=$1 out=$2
list=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/data/synthetic.list
[ -x "$bin" ] || { echo "synth-fixtures.sh: $bin is not an executable" >&2; exit 2; }
mkdir -p "$out/models/synthetic"

bad=0 n=0 new_list=""
while IFS= read -r line; do
  case "$line" in ''|'#'*) new_list+="$line"$'\n'; continue ;; esac
  IFS='|' read -r name sum args <<<"$line"
  path="$out/models/synthetic/$name.gguf"
  # Written every time (about 0.3 s each): a file left from an older build must not pass for new output.
  # shellcheck disable=SC2086  # the arguments column is split on purpose
  # A line may set general.name itself (--name in its arguments); otherwise it is NAME.
  case " $args " in *" --name "*) named=() ;; *) named=(--name "$name") ;; esac
  "$bin" synth -o "$path.tmp" --seed 7 "${named[@]}" $args >/dev/null
  mv "$path.tmp" "$path"
  got=$(sha256sum "$path" | cut -d' ' -f1)
  n=$((n + 1))
  if [ "$got" != "$sum" ]; then
    if [ $update -eq 1 ]; then echo "synth-fixtures.sh: $name: sha256 now $got (was $sum)" >&2
    else echo "synth-fixtures.sh: $name.gguf has sha256 $got; tests/data/synthetic.list records $sum" >&2; bad=$((bad + 1)); fi
  fi
  new_list+="$name|$got|$args"$'\n'
done <"$list"
if [ $update -eq 1 ]; then printf '%s' "$new_list" >"$list"; fi
if [ $bad -gt 0 ]; then
  echo "synth-fixtures.sh: $bad of $n synthetic models differ from their recorded bytes (synth or a quantizer changed" \
       "its output; if deliberately, rerun with --update and regenerate the llama.cpp references, tests/data/README.md)" >&2
  exit 1
fi
echo "synth-fixtures.sh: $n synthetic models written to $out/models/synthetic, every sha256 as recorded"
