#include "model/inspect.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "chat/chat_template.h"
#include "model/arch.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/error.h"
#include "util/sha256.h"

namespace detaudit::model {
namespace {

using nlohmann::json;


// A float32 metadata value as the decimal a person wrote (1e-05, not 9.999999747378752e-06).
double float_value(const gguf::value& v, const std::string& what) {
  double d = v.as_double(what);
  if (v.type != gguf::VALUE_FLOAT32) return d;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.7g", d);
  return std::strtod(buf, nullptr);
}

// A metadata value as JSON; arrays longer than max_elems are summarised with their first elements.
json value_to_json(const gguf::value& v, size_t max_elems) {
  switch (v.type) {
    case gguf::VALUE_STRING: return v.s;
    case gguf::VALUE_BOOL: return v.u != 0;
    case gguf::VALUE_FLOAT32: return float_value(v, "value");
    case gguf::VALUE_FLOAT64: return v.f;
    case gguf::VALUE_ARRAY: {
      json a = json::array();
      for (size_t i = 0; i < v.arr.size() && i < max_elems; ++i) a.push_back(value_to_json(v.arr[i], max_elems));
      if (v.arr.size() <= max_elems) return a;
      return {{"array_of", gguf::value_type_name(v.elem_type)}, {"count", v.arr.size()}, {"first", a}};
    }
    case gguf::VALUE_INT8: case gguf::VALUE_INT16: case gguf::VALUE_INT32: case gguf::VALUE_INT64: return v.i;
    default: return v.u;
  }
}

// Hyperparameters under the {arch}.* keys, for any architecture.
json generic_hparams(const gguf::file& f, const std::string& arch) {
  json h = json::object();
  const std::pair<const char*, const char*> keys[] = {
      {"n_layer", "block_count"}, {"n_embd", "embedding_length"}, {"n_ff", "feed_forward_length"},
      {"n_head", "attention.head_count"}, {"n_head_kv", "attention.head_count_kv"},
      {"n_ctx_train", "context_length"}, {"n_rot", "rope.dimension_count"}, {"head_dim", "attention.key_length"},
      {"n_swa", "attention.sliding_window"}, {"swa_period", "attention.sliding_window_pattern"},
      {"n_expert", "expert_count"}, {"n_expert_used", "expert_used_count"},
      {"n_ff_exp", "expert_feed_forward_length"}, {"n_expert_shared", "expert_shared_count"},
      {"n_ctx_orig_yarn", "rope.scaling.original_context_length"}};
  // A value of the wrong type or range is left out here: the engine section says what is wrong.
  auto guarded = [](auto&& fn) {
    try {
      fn();
    } catch (const input_error&) {
    }
  };
  for (auto [name, suffix] : keys) {
    const gguf::value* v = f.find(arch + "." + suffix);
    if (v && v->is_integer()) guarded([&] { h[name] = v->as_int(arch + "." + suffix); });
  }
  const gguf::value* base = f.find(arch + ".rope.freq_base");
  if (base) guarded([&] { h["rope_freq_base"] = float_value(*base, arch + ".rope.freq_base"); });
  const gguf::value* eps = f.find(arch + ".attention.layer_norm_rms_epsilon");
  if (eps) guarded([&] { h["rms_eps"] = float_value(*eps, arch + ".attention.layer_norm_rms_epsilon"); });
  const std::pair<const char*, const char*> floats[] = {{"rope_freq_base_swa", "rope.freq_base_swa"},
                                                        {"attn_softcap", "attn_logit_softcapping"},
                                                        {"final_softcap", "final_logit_softcapping"},
                                                        {"rope_scaling_factor", "rope.scaling.factor"},
                                                        {"rope_attn_factor", "rope.scaling.attn_factor"}};
  for (auto [name, suffix] : floats)
    if (const gguf::value* v = f.find(arch + "." + suffix)) guarded([&] { h[name] = float_value(*v, arch + "." + suffix); });
  if (const gguf::value* v = f.find(arch + ".rope.scaling.type"); v && v->type == gguf::VALUE_STRING)
    h["rope_scaling"] = gguf::printable(v->s);
  return h;
}

std::string num_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

json special_token(const gguf::file& f, const std::vector<std::string>& tokens, const char* key) {
  const gguf::value* v = f.find(std::string("tokenizer.ggml.") + key);
  if (!v || !v->is_integer()) return nullptr;
  int64_t id = v->as_int(key);
  json t = {{"id", id}};
  if (id >= 0 && id < static_cast<int64_t>(tokens.size())) t["piece"] = tokens[static_cast<size_t>(id)];
  // -1 (also as an unsigned 32-bit 4294967295, as llama.cpp's converter writes it) means "not set";
  // any other id outside the vocabulary names no token either.
  else t["unset"] = true;
  return t;
}

json vocab_info(const gguf::file& f) {
  if (!f.find("tokenizer.ggml.model")) return nullptr;
  json v;
  std::string model = f.get_string("tokenizer.ggml.model");
  v["model"] = model;
  v["type"] = model == "llama" ? "spm" : model == "gpt2" ? "bpe" : model;
  std::vector<std::string> tokens = f.find("tokenizer.ggml.tokens") ? f.get_strings("tokenizer.ggml.tokens")
                                                                     : std::vector<std::string>{};
  v["size"] = tokens.size();
  v["pre"] = f.get_string("tokenizer.ggml.pre", "default");
  if (const gguf::value* m = f.find("tokenizer.ggml.merges")) v["n_merges"] = m->arr.size();
  if (f.find("tokenizer.ggml.token_type")) {
    size_t n_control = 0, n_user = 0;
    for (int32_t t : f.get_i32s("tokenizer.ggml.token_type")) {
      n_control += t == 3;
      n_user += t == 4;
    }
    v["n_control_tokens"] = n_control;
    v["n_user_defined_tokens"] = n_user;
  }
  json special = json::object();
  for (const char* k : {"bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id", "eot_token_id"}) {
    json t = special_token(f, tokens, k);
    if (!t.is_null()) special[std::string(k).substr(0, std::string(k).find("_token_id"))] = t;
  }
  v["special"] = special;
  if (f.find("tokenizer.ggml.add_bos_token")) v["add_bos"] = f.get_bool("tokenizer.ggml.add_bos_token", false);
  if (f.find("tokenizer.ggml.add_eos_token")) v["add_eos"] = f.get_bool("tokenizer.ggml.add_eos_token", false);
  return v;
}

json chat_info(const gguf::file& f) {
  if (!f.find("tokenizer.chat_template")) return {{"present", false}};
  const chat::chat_template_info t = chat::chat_template_parse(f.get_string("tokenizer.chat_template"));
  return {{"present", true}, {"family", t.family ? json(chat::template_family_name(*t.family)) : json(nullptr)},
          {"bytes", t.bytes}, {"too_large", t.too_large}};
}

// "N of L layers attend through a sliding window of W positions (layer l slides when l % P < P-1)".
// Period 0: "every layer attends through ... (period 0)".
std::string sliding_text(const hparams& hp) {
  int64_t n_sliding = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) n_sliding += layer_swa(hp, l) ? 1 : 0;
  if (hp.swa_period == 0)
    return "every layer attends through a sliding window of " + std::to_string(hp.n_swa) + " positions (period 0)";
  return std::to_string(n_sliding) + " of " + std::to_string(hp.n_layer) + " layers attend through a sliding window of " +
         std::to_string(hp.n_swa) + " positions (layer l slides when l % " + std::to_string(hp.swa_period) + " < " +
         std::to_string(hp.swa_period - 1) + ")";
}

// Whether some layer attends to every position.
bool has_full_layer(const hparams& hp) {
  for (int64_t l = 0; l < hp.n_layer; ++l)
    if (!layer_swa(hp, l)) return true;
  return false;
}

// Whether the engine can run the file, and if not, why.
json engine_support(const gguf::file& f, const std::string& arch) {
  if (!arch_from_name(arch)) return {{"runnable", false}, {"reason", "architecture '" + arch + "' is not supported"}};
  try {
    hparams hp = hparams_from_gguf(f);
    arch_check_tensors(f, hp);
    for (const gguf::tensor_info& t : f.tensors())
      if (!model_type_supported(t.type))
        return {{"runnable", false},
                {"reason", "tensor '" + t.name + "' has type " + gguf::dtype_get(t.type).name + ", which the engine does not compute"}};
    json notes = json::array();
    if (arch_fused_qkv_ffn(hp.arch))
      notes.push_back("attn_qkv holds Q, K and V and ffn_up holds gate and up (2 x n_ff rows); the engine reads them as row ranges");
    if (hp.arch == ARCH_PHI3 && hp.n_swa > 0)
      notes.push_back("sliding_window " + std::to_string(hp.n_swa) + " is not applied, as in the current llama.cpp " +
                      "(llama.cpp b4748 applied it: outputs part past " + std::to_string(hp.n_swa) + " positions)");
    if (arch_gemma_block(hp.arch)) {
      notes.push_back("gemma block: embeddings scaled by sqrt(n_embd), RMS norms on the attention and FFN outputs "
                      "(post_attention_norm, post_ffw_norm), a GELU (tanh form) gate");
      if (hp.swa) {
        notes.push_back(sliding_text(hp) + ", with RoPE base " + num_text(hp.rope_freq_base_swa) +
                        (hp.rope_scale_linear_swa != 1.0 ? " and linear scale " + num_text(hp.rope_scale_linear_swa) : "") +
                        "; the others attend to every position with base " + num_text(hp.rope_freq_base));
      } else {
        notes.push_back("no sliding window: every layer attends to every position");
      }
      if (hp.attn_softcap > 0) notes.push_back("attention scores soft-capped: " + num_text(hp.attn_softcap) + " tanh(s / " + num_text(hp.attn_softcap) + ")");
      if (hp.final_softcap > 0) notes.push_back("logits soft-capped: " + num_text(hp.final_softcap) + " tanh(l / " + num_text(hp.final_softcap) + ")");
      if (hp.attn_scale_override > 0)
        notes.push_back("attention scale 1/sqrt(n_embd / n_head) = " + num_text(hp.attn_scale_override) +
                        " (llama.cpp's rule for the 27B models, decided by the layer count)");
    }
    if (hp.rope_yarn) {
      int64_t full = 0;  // a layer attending to every position (its base is the model's), else layer 0
      while (full + 1 < hp.n_layer && layer_swa(hp, full)) ++full;
      const rope_params rp = layer_rope(hp, full);
      notes.push_back("YaRN RoPE: factor " + num_text(1.0 / hp.rope_scale_linear) + " over " + std::to_string(hp.n_ctx_orig_yarn) +
                      " original positions; rotation pairs below " + num_text(rp.corr_low) + " keep their angle, pairs above " +
                      num_text(rp.corr_high) + " are interpolated by the factor, the ones between ramp from one to the other" +
                      " (base " + num_text(rp.freq_base) + "); cos and sin scaled by " + num_text(rp.mscale));
    }
    if (arch_oai_block(hp.arch)) {
      notes.push_back("gpt-oss block: biases on Q, K, V and the attention output, one learned attention sink per head "
                      "(attn_sinks: a score with no value that joins every softmax), post_attention_norm as the FFN's input "
                      "norm, biased router and experts, the clamped SwiGLU (min(gate, 7), up clamped to [-7, 7], alpha 1.702), "
                      "routing weights a softmax over the chosen experts' logits");
      if (hp.swa)
        notes.push_back(sliding_text(hp) +
                        (hp.rope_freq_base_swa != hp.rope_freq_base ? ", with RoPE base " + num_text(hp.rope_freq_base_swa) : "") +
                        (has_full_layer(hp) ? "; the others attend to every position" : ""));
    }
    if (arch_moe(hp.arch))
      notes.push_back("mixture of experts: " + std::to_string(hp.n_expert) + " experts of width " + std::to_string(hp.n_ff_exp) +
                      ", " + std::to_string(hp.n_expert_used) + " per token: softmax over the router's (ffn_gate_inp) logits, the " +
                      std::to_string(hp.n_expert_used) + " largest (ties: lower expert id), weights " +
                      (hp.expert_weights_norm ? "renormalised to sum to 1" : "as the softmax gives them") +
                      "; each expert of ffn_{gate,up,down}_exps is read as a row range of the 3-D tensor");
    return {{"runnable", true}, {"rope", arch_rope_kind(hp.arch) == ROPE_NEOX ? "neox" : "norm"},
            {"head_dim", hp.head_dim}, {"tied_output", hp.tied_output}, {"n_vocab", hp.n_vocab},
            {"fused_qkv_ffn", arch_fused_qkv_ffn(hp.arch)}, {"notes", notes}};
  } catch (const input_error& e) {
    return {{"runnable", false}, {"reason", e.what()}};
  }
}

std::string shape_str(const json& ne) {
  std::string s;
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? " x " : "") + std::to_string(ne[i].get<int64_t>());
  return s;
}

}  // namespace

std::string safe_dump(const json& j, int indent) { return j.dump(indent, ' ', false, json::error_handler_t::replace); }

std::string file_type_name(int64_t ft) {
  static const std::map<int64_t, const char*> names = {
      {0, "ALL_F32"}, {1, "MOSTLY_F16"}, {2, "MOSTLY_Q4_0"}, {3, "MOSTLY_Q4_1"}, {7, "MOSTLY_Q8_0"},
      {8, "MOSTLY_Q5_0"}, {9, "MOSTLY_Q5_1"}, {10, "MOSTLY_Q2_K"}, {11, "MOSTLY_Q3_K_S"}, {12, "MOSTLY_Q3_K_M"},
      {13, "MOSTLY_Q3_K_L"}, {14, "MOSTLY_Q4_K_S"}, {15, "MOSTLY_Q4_K_M"}, {16, "MOSTLY_Q5_K_S"},
      {17, "MOSTLY_Q5_K_M"}, {18, "MOSTLY_Q6_K"}, {32, "MOSTLY_BF16"}, {38, "MOSTLY_MXFP4_MOE"}};
  auto it = names.find(ft);
  return it == names.end() ? "unknown(" + std::to_string(ft) + ")" : it->second;
}

json inspect_file(const std::string& path, const inspect_options& opt) {
  gguf::file f = gguf::file::open(path);
  json info;
  info["file"] = path;
  info["size"] = f.size();
  info["gguf_version"] = f.version();
  info["alignment"] = f.alignment();
  info["n_kv"] = f.metadata().size();
  info["n_tensors"] = f.tensors().size();
  std::string arch = f.get_string("general.architecture", "");
  info["architecture"] = arch.empty() ? json(nullptr) : json(arch);
  if (f.find("general.name")) info["name"] = f.get_string("general.name");
  if (!arch.empty()) info["hparams"] = generic_hparams(f, arch);
  if (f.find("general.file_type")) {
    int64_t ft = f.get_int("general.file_type");
    info["file_type"] = {{"id", ft}, {"name", file_type_name(ft)}};
  }
  info["vocab"] = vocab_info(f);
  info["chat_template"] = chat_info(f);
  std::map<std::string, uint64_t> type_counts;
  uint64_t n_params = 0, n_bytes = 0;
  json tensors = json::array();
  for (const gguf::tensor_info& t : f.tensors()) {
    const char* tname = gguf::dtype_get(t.type).name;
    type_counts[tname]++;
    n_params += t.n_elements;
    n_bytes += t.n_bytes;
    if (opt.tensors) tensors.push_back({{"name", t.name}, {"type", tname}, {"shape", t.ne}, {"bytes", t.n_bytes}});
  }
  info["tensor_types"] = type_counts;
  info["n_params"] = n_params;
  info["tensor_bytes"] = n_bytes;
  if (!arch.empty() && !f.tensors().empty()) info["engine"] = engine_support(f, arch);
  if (opt.tensors) info["tensors"] = tensors;
  if (opt.metadata) {
    json md = json::array();  // file order
    for (const gguf::kv& e : f.metadata()) {
      std::string type = gguf::value_type_name(e.val.type);
      if (e.val.type == gguf::VALUE_ARRAY) type += std::string("[") + gguf::value_type_name(e.val.elem_type) + "]";
      md.push_back({{"key", e.key}, {"type", type}, {"value", value_to_json(e.val, 16)}});
    }
    info["metadata"] = md;
  }
  if (opt.sha256) info["sha256"] = sha256_file(path);
  return info;
}

std::string inspect_to_text(const json& info) {
  std::ostringstream o;
  auto line = [&](const std::string& k, const std::string& v) { o << k << std::string(k.size() < 18 ? 18 - k.size() : 1, ' ') << v << "\n"; };
  auto str = [](const json& j) { return j.is_string() ? j.get<std::string>() : safe_dump(j); };
  // What the file says, escaped as the GGUF reader quotes names: a file cannot drive the terminal.
  auto from_file = [](const json& j) { return j.is_string() ? gguf::printable(j.get<std::string>(), 4096) : safe_dump(j); };
  line("file", str(info["file"]));
  line("gguf", "v" + str(info["gguf_version"]) + ", " + str(info["size"]) + " bytes, " + str(info["n_kv"]) + " keys, " +
                   str(info["n_tensors"]) + " tensors, alignment " + str(info["alignment"]));
  line("architecture", info["architecture"].is_null() ? "(none)" : from_file(info["architecture"]));
  if (info.contains("name")) line("name", from_file(info["name"]));
  if (info.contains("hparams"))
    for (auto& [k, v] : info["hparams"].items()) line("  " + k, str(v));
  if (info.contains("file_type")) line("file type", str(info["file_type"]["name"]));
  const json& v = info["vocab"];
  if (v.is_null()) line("vocab", "(none)");
  else {
    line("vocab", from_file(v["type"]) + " (" + from_file(v["model"]) + "), " + str(v["size"]) + " tokens, pre " + from_file(v["pre"]) +
                      (v.contains("n_merges") ? ", " + str(v["n_merges"]) + " merges" : ""));
    for (auto& [k, t] : v["special"].items())
      line("  " + k, t.contains("unset") ? "none (id " + str(t["id"]) + " is outside the vocabulary)"
                                          : str(t["id"]) + (t.contains("piece") ? " " + safe_dump(t["piece"]) : ""));
  }
  const json& c = info["chat_template"];
  line("chat template", !c["present"].get<bool>()         ? "(none)"
                       : c.value("too_large", false)      ? str(c["bytes"]) + " bytes, too large to read (chat needs --chat-template)"
                       : c["family"].is_null()            ? "present, family not recognised"
                                                          : str(c["family"]));
  std::string types;
  for (auto& [k, n] : info["tensor_types"].items()) types += (types.empty() ? "" : ", ") + k + " x" + str(n);
  line("tensors", types.empty() ? "(none)" : types);
  line("parameters", str(info["n_params"]));
  if (info.contains("engine"))
    line("engine", info["engine"]["runnable"].get<bool>() ? "runnable" : "not runnable: " + message_line(str(info["engine"]["reason"])));
  if (info.contains("engine") && info["engine"].contains("notes"))
    for (const json& n : info["engine"]["notes"]) line("  note", str(n));
  if (info.contains("sha256")) line("sha256", str(info["sha256"]));
  if (info.contains("metadata")) {
    o << "\n";
    for (const json& e : info["metadata"]) {
      std::string text = safe_dump(e["value"]);
      if (text.size() > 160) text = text.substr(0, 157) + "...";
      o << from_file(e["key"]) << " (" << str(e["type"]) << ") = " << text << "\n";
    }
  }
  if (info.contains("tensors")) {
    o << "\n";
    for (const json& t : info["tensors"]) {
      std::string name = from_file(t["name"]);
      o << name << std::string(name.size() < 28 ? 28 - name.size() : 1, ' ') << str(t["type"])
        << std::string(str(t["type"]).size() < 8 ? 8 - str(t["type"]).size() : 1, ' ') << shape_str(t["shape"]) << "  "
        << str(t["bytes"]) << " bytes\n";
    }
  }
  return o.str();
}

}  // namespace detaudit::model
