#include "backends/op_support.h"

#include <algorithm>
#include <set>

#include "gguf/weight_types.h"
#include "model/arch.h"

namespace detaudit::backends {
namespace {

constexpr support D = support::device, H = support::host, N = support::no;

std::vector<op_support_row> rows_build() {
  std::vector<op_support_row> r = {
      {"matmul", "every architecture", D, D, D},
      {"rms_norm", "every architecture", D, D, D},
      {"rope", "every architecture", D, D, D},
      {"add", "every architecture", D, D, D},
      {"add_bias", "qwen2, gpt-oss", D, D, D},
      {"kv_store", "every architecture", D, D, D},
      {"attention", "every architecture", D, D, D},
      {"attention: sliding window", "gemma2, gemma3, gpt-oss", D, D, D},
      {"attention: soft cap", "gemma2", D, D, D},
      {"attention: sinks", "gpt-oss", D, D, D},
      {"swiglu", "llama, qwen2, qwen3, phi3, qwen3moe (experts)", D, D, D},
      {"geglu", "gemma2, gemma3", D, D, D},
      {"swiglu_oai", "gpt-oss", D, D, D},
      {"scale", "gemma2, gemma3 (embeddings)", D, D, D},
      {"softcap", "gemma2 (logits)", D, D, D},
      {"moe_route", "qwen3moe, gpt-oss", D, H, H},
      {"scale_rows", "qwen3moe, gpt-oss (expert weights)", D, H, H},
  };
  for (const gguf::weight_type& t : gguf::weight_types()) {
    const support g = t.gpu ? D : N;
    r.push_back({std::string("weights: ") + gguf::dtype_get(t.type).name, "models stored in it", D, g, g});
  }
  return r;
}

}  // namespace

const char* support_name(support s) { return s == support::device ? "yes" : s == support::host ? "host" : "no"; }

const std::vector<op_support_row>& op_support() {
  static const std::vector<op_support_row> rows = rows_build();
  return rows;
}

std::vector<std::string> parts_needed(const model::model& m) {
  const model::hparams& hp = m.hp();
  std::vector<std::string> p = {"matmul", "rms_norm", "rope", "add", "kv_store", "attention"};
  bool bias = false, sinks = false, window = false;
  for (int64_t l = 0; l < static_cast<int64_t>(m.layers.size()); ++l) {
    const model::layer_weights& w = m.layers[static_cast<size_t>(l)];
    bias = bias || !w.bq.empty() || !w.bo.empty();
    sinks = sinks || !w.sinks.empty();
    window = window || model::layer_swa(hp, l);
  }
  if (bias) p.push_back("add_bias");
  if (window) p.push_back("attention: sliding window");
  if (hp.attn_softcap > 0) p.push_back("attention: soft cap");
  if (sinks) p.push_back("attention: sinks");
  if (model::arch_gemma_block(hp.arch)) {
    p.push_back("geglu");
    p.push_back("scale");
  } else if (model::arch_oai_block(hp.arch)) {
    p.push_back("swiglu_oai");
  } else {
    p.push_back("swiglu");
  }
  if (hp.final_softcap > 0) p.push_back("softcap");
  if (hp.n_expert > 0) {
    p.push_back("moe_route");
    p.push_back("scale_rows");
  }
  std::set<gguf::dtype> types;
  for (const gguf::tensor_info& t : m.file().tensors()) types.insert(t.type);
  for (gguf::dtype t : types)
    if (gguf::weight_type_of(t)) p.push_back(std::string("weights: ") + gguf::dtype_get(t).name);
  return p;
}

std::vector<std::string> parts_missing(backend_kind b, const model::model& m) {
  std::vector<std::string> missing;
  for (const std::string& part : parts_needed(m)) {
    const auto it = std::find_if(op_support().begin(), op_support().end(),
                                 [&](const op_support_row& r) { return r.part == part; });
    if (it == op_support().end() || it->on(b) == support::no) missing.push_back(part);
  }
  return missing;
}

std::string op_support_markdown() {
  std::string s = "| part | cpu | vulkan | cuda | used by |\n| --- | --- | --- | --- | --- |\n";
  for (const op_support_row& r : op_support())
    s += "| " + r.part + " | " + support_name(r.cpu) + " | " + support_name(r.vulkan) + " | " + support_name(r.cuda) +
         " | " + r.used_by + " |\n";
  return s;
}

}  // namespace detaudit::backends
