#!/usr/bin/env bash
# Finds the public test data (stories260K, tokenizer vectors, GSM8K): files with a public source,
# pinned by sha256. docs/fixtures.md lists every fixture and where it comes from.
#
#   scripts/fixtures.sh --dir     print the fixtures folder, resolving it as below; exit 0
#   scripts/fixtures.sh --check   also require every public file, checksums verified; exit 1 naming
#                                 what is missing or wrong
#   scripts/fixtures.sh --list    print the manifest: PATH|SHA256|URL per line
#
# Resolution order:
#   1. $DETAUDIT_FIXTURES, if set (must be a folder)
#   2. ../shared/fixtures beside the checkout (an offline copy)
#   3. the user cache ${XDG_CACHE_HOME:-~/.cache}/detaudit/fixtures, filled by checksum-verified
#      downloads ($DETAUDIT_FIXTURES_MIRROR, if set, replaces each URL by MIRROR/PATH)
# A file that cannot be downloaded is named on stderr and left out; --dir still prints the folder,
# and the tests that need that file are reported as skipped (exit 77), never passed.
# The synthetic models are not here: the build generates them (scripts/synth-fixtures.sh), and
# llama.cpp's outputs on them are committed under tests/data.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

# path | sha256 | public source (a raw file at a pinned commit)
manifest() {
  cat <<'LIST'
models/stories260K.gguf|270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d|https://huggingface.co/ggml-org/models/resolve/main/tinyllamas/stories260K.gguf
models/llama-2-tiny-random.gguf|81f226c62d28ed4a1a9b9fa080fcd9f0cc40e0f9d5680036583ff98fbcd035cb|https://raw.githubusercontent.com/ollama/ollama/87a88cc8f923eb0d8b65c45a4b31cd87b34ee5b1/api/data/llama-2-tiny-random.gguf
vocab/ggml-vocab-llama-spm.gguf|16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-llama-spm.gguf
vocab/ggml-vocab-phi-3.gguf|967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-phi-3.gguf
vocab/ggml-vocab-gpt-2.gguf|cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-gpt-2.gguf
vocab/ggml-vocab-llama-spm.gguf.inp|ef7a25a263fba141f64a8a842ceb1c572cdb8e1313f592d974f7a06bbd3a4934|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-llama-spm.gguf.inp
vocab/ggml-vocab-llama-spm.gguf.out|ea602819af9f9af53a7af285a284ee810e70a4a14a5972e4c891ccd683488af5|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-llama-spm.gguf.out
vocab/ggml-vocab-phi-3.gguf.inp|ef7a25a263fba141f64a8a842ceb1c572cdb8e1313f592d974f7a06bbd3a4934|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-phi-3.gguf.inp
vocab/ggml-vocab-phi-3.gguf.out|ea602819af9f9af53a7af285a284ee810e70a4a14a5972e4c891ccd683488af5|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-phi-3.gguf.out
vocab/ggml-vocab-gpt-2.gguf.inp|ef7a25a263fba141f64a8a842ceb1c572cdb8e1313f592d974f7a06bbd3a4934|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-gpt-2.gguf.inp
vocab/ggml-vocab-gpt-2.gguf.out|a2630e9cf29c0ddbd9fd79fe358dc83e80af779f886eeaa7627dbfdeec54bae6|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-gpt-2.gguf.out
vocab/ggml-vocab-qwen2.gguf.inp|ef7a25a263fba141f64a8a842ceb1c572cdb8e1313f592d974f7a06bbd3a4934|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-qwen2.gguf.inp
vocab/ggml-vocab-qwen2.gguf.out|4fdf5ff70fcfbb819642b522a47b8f61522fa20d938fa7470a8497bc52773cd4|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-qwen2.gguf.out
vocab/ggml-vocab-deepseek-r1-qwen.gguf.inp|ef7a25a263fba141f64a8a842ceb1c572cdb8e1313f592d974f7a06bbd3a4934|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-deepseek-r1-qwen.gguf.inp
vocab/ggml-vocab-deepseek-r1-qwen.gguf.out|4fdf5ff70fcfbb819642b522a47b8f61522fa20d938fa7470a8497bc52773cd4|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-deepseek-r1-qwen.gguf.out
vocab/ggml-vocab-llama-bpe.gguf.inp|ef7a25a263fba141f64a8a842ceb1c572cdb8e1313f592d974f7a06bbd3a4934|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-llama-bpe.gguf.inp
vocab/ggml-vocab-llama-bpe.gguf.out|5c92e3c68163aa74c73a6128c0598c1dfad31dde068a0a48be496d3046816ec1|https://raw.githubusercontent.com/ggerganov/llama.cpp/c392e5094deaf2d1a7c18683214f007fad3fe42b/models/ggml-vocab-llama-bpe.gguf.out
vocab/qwen/qwen.tiktoken|6cf5f2a2560a7d581548aeb0c31c6a60de2d3e873152346e421affc871699be4|https://raw.githubusercontent.com/x1ngzai/Qwen-VL-Chat-Int4/1cd721a27dd000fc4cf688c6ad58e614da1d600d/qwen.tiktoken
vocab/llama3.2/encoder.json|48fc3518556b8ed94362d811038bebc81591cdb406fccb8cdc2f96df618f3790|https://raw.githubusercontent.com/ollama/ollama/fb30760996871fa9460115c753afd2c60d4ab0f7/tokenizer/testdata/llama3.2/encoder.json
vocab/llama3.2/vocab.bpe|b8976ea9a5406f0e1718048f3b18f52555cb9872b317ad83d2d17fa992c17274|https://raw.githubusercontent.com/ollama/ollama/fb30760996871fa9460115c753afd2c60d4ab0f7/tokenizer/testdata/llama3.2/vocab.bpe
data/test.jsonl|3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14|https://raw.githubusercontent.com/openai/grade-school-math/3101c7d5072418e28b9008a6636bde82a006892c/grade_school_math/data/test.jsonl
LIST
}

die() { echo "fixtures.sh: $*" >&2; exit 1; }

resolve() {
  if [ -n "${DETAUDIT_FIXTURES:-}" ]; then
    [ -d "$DETAUDIT_FIXTURES" ] || die "DETAUDIT_FIXTURES=$DETAUDIT_FIXTURES is not a folder"
    (cd "$DETAUDIT_FIXTURES" && pwd); return
  fi
  if [ -d "$root/../shared/fixtures" ]; then
    (cd "$root/../shared/fixtures" && pwd); return
  fi
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/detaudit/fixtures"
  download "$cache"
  echo "$cache"
}

# Downloads every public file the cache lacks or holds with a wrong checksum. Never fails: what
# could not be fetched is named on stderr (the tests needing it are skipped).
download() {
  local cache=$1 missing=() path sum url
  mkdir -p "$cache" || die "cannot create the fixtures cache $cache"
  while IFS='|' read -r path sum url; do
    if [ -f "$cache/$path" ] && echo "$sum  $cache/$path" | sha256sum -c --status; then continue; fi
    [ -n "${DETAUDIT_FIXTURES_MIRROR:-}" ] && url="${DETAUDIT_FIXTURES_MIRROR%/}/$path"
    mkdir -p "$(dirname "$cache/$path")"
    echo "fixtures.sh: downloading $path" >&2
    if command -v curl >/dev/null && curl -fsSL --retry 2 --connect-timeout 10 --max-time 300 -o "$cache/$path.part" "$url" &&
       echo "$sum  $cache/$path.part" | sha256sum -c --status; then
      mv "$cache/$path.part" "$cache/$path"
    else
      rm -f "$cache/$path.part" "$cache/$path"; missing+=("$path")
    fi
  done < <(manifest)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "fixtures.sh: could not download or verify ${#missing[@]} public file(s): ${missing[*]}" \
         "(no network, or the checksum differs; set DETAUDIT_FIXTURES to a copy)" >&2
  fi
}

check() {
  local dir=$1 bad=() path sum url
  while IFS='|' read -r path sum url; do
    if [ ! -f "$dir/$path" ]; then bad+=("$path (missing)")
    elif ! echo "$sum  $dir/$path" | sha256sum -c --status; then bad+=("$path (sha256 differs)"); fi
  done < <(manifest)
  [ ${#bad[@]} -eq 0 ] || die "fixtures folder $dir: ${bad[*]}"
}

case "${1:---dir}" in
  --dir) resolve ;;
  --check) d=$(resolve); check "$d"; echo "$d" ;;
  --list) manifest ;;
  -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown argument '$1' (use --dir, --check or --list)" ;;
esac
