// Importing byte-level BPE vocabularies that are not GGUF files, and writing vocab-only GGUFs.
//
// Goals: build, from a tiktoken rank file or a Hugging Face / GPT-2 style encoder.json +
// vocab.bpe pair, the same vocabulary llama.cpp's converter would put in a GGUF (tokens in
// GPT-2 byte-to-unicode form, merges by rank, the family's special tokens as control tokens),
// and write it as a vocab-only GGUF llama.cpp can load.
// Non-goals: tokenizer.json, SentencePiece .model files, added-token lists other than the
// built-in qwen2 and llama3 tables.
#pragma once

#include <string>

#include "tokenizer/vocab.h"

namespace detaudit::tokenizer {

// A tiktoken rank file: one "base64(token bytes) rank" per line (CRLF tolerated), ranks 0..n-1
// in order; rank == id. Merges are recovered from the ranks as tiktoken -> Hugging Face
// converters do: for each token of two or more bytes, BPE over its bytes using only tokens of
// lower rank must end in exactly two parts, which are its merge. `pre` selects the
// pre-tokenizer; for the qwen2 and llama3 families the family's special tokens are appended.
// Throws input_error naming the file and line on a malformed file.
vocab vocab_import_tiktoken(const std::string& path, const std::string& pre);

// encoder.json (a JSON object: token in byte-to-unicode form -> id, ids 0..n-1) and vocab.bpe
// (one "left right" merge per line, in rank order; an optional "#version" first line).
// Special tokens are appended as for vocab_import_tiktoken.
vocab vocab_import_hf(const std::string& encoder_json, const std::string& merges_bpe, const std::string& pre);

// The general.architecture a vocab-only GGUF of this vocabulary gets: "llama" for the llama3
// family, "qwen2" for the qwen2 family, "llama" for SentencePiece, "gpt2" otherwise.
std::string vocab_architecture(const vocab& v);

// Writes a vocab-only GGUF (no tensors): general.architecture, general.name = `name`, the
// architecture's hyperparameter keys llama.cpp requires (placeholder values of a small model of
// that family) and every tokenizer key. Throws on I/O errors.
void vocab_write_vocab_only(const std::string& path, const vocab& v, const std::string& name);

}  // namespace detaudit::tokenizer
