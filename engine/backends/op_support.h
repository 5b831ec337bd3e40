// Which backend computes which part of the exact forward pass: the one place a backend declares
// its support. A GPU backend refuses, when the model is loaded, a model that needs a part it lacks,
// naming every such part; `detaudit devices --ops` prints the table, and docs/backends.md holds the
// same table (a test compares the two).
//
// The rows are model::ops' ops, the attention variants the architectures use, and one row per
// weight type the engine computes (gguf/weight_types.h: its `gpu` column). CPU computes every row;
// a GPU backend computes a row on the device, on the host between device ops (work too small to pay
// for the copies, given the CPU backend's own function), or not at all.
// Non-goals: the float and reference numerics (CPU only, every op), speed.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/model.h"

namespace detaudit::backends {

// device: the backend's own kernels compute it (on a GPU: on the device); host: a GPU backend runs
// the CPU backend's function on the host between device ops; no: the backend cannot.
enum class support { no, device, host };
const char* support_name(support s);  // "no", "yes" (device), "host"

struct op_support_row {
  std::string part;     // "geglu", "attention: sliding window", "weights: q4_K"
  std::string used_by;  // "every architecture", "gemma2, gemma3"
  support cpu = support::device, vulkan = support::no, cuda = support::no;
  support on(backend_kind b) const { return b == BACKEND_CPU ? cpu : b == BACKEND_VULKAN ? vulkan : cuda; }
};

// Every row, in a fixed order: the ops, the attention variants, the weight types.
const std::vector<op_support_row>& op_support();
// The parts model m needs: from its architecture and hyperparameters (the ops forward.cpp calls for
// it) and the types of its tensors.
std::vector<std::string> parts_needed(const model::model& m);
// Those of parts_needed(m) that backend b does not compute.
std::vector<std::string> parts_missing(backend_kind b, const model::model& m);
// The table as Markdown: a header, then one line per row ("| part | cpu | vulkan | cuda | used by |").
std::string op_support_markdown();

}  // namespace detaudit::backends
