// The pager as a ggml backend device, so unmodified llama.cpp sends it the expert matmuls.
//
// Expert tensors are placed (through llama_model_params.tensor_buft_overrides) in this
// device's buffer type, which holds no bytes: it reserves address space, and its set_tensor
// ignores what the loader passes, because the pager reads expert bytes on demand. The device
// claims MUL_MAT_ID on those tensors; its graph_compute hands each to the attached Pager.
//
// ggml reaches the pager only through the device: its context holds the attached pager, and
// every callback finds it from the handle it is given. attach_pager (PagedModel, which owns the
// pager) is the one place that sets it; the engines take the pager from PagedModel.
#pragma once

#include "ggml-backend.h"

#include <cstdint>
#include <string>

namespace epq {

class Pager;

// Registers the device with ggml once (idempotent). Must run before a model is loaded.
void register_pager_device();
// The buffer type to override expert tensors to.
ggml_backend_buffer_type_t pager_buffer_type();
// The pager that serves the next contexts' expert matmuls (nullptr to detach).
void attach_pager(Pager * pager);
// Pager::check_model_file on the attached pager (nothing when none is attached).
void check_attached_model_file();
// Bytes of the tensors llama.cpp's loaded models placed in the pager's buffer type (address
// space, not memory): every routed expert of a model when all of them are paged.
uint64_t pager_buffer_bytes();
// The last error the device hit while computing, or "" (llama.cpp only sees a status code).
std::string pager_last_error();
// Also print each error to stderr as it happens: for callers that cannot ask (a server, whose
// log then says why a request failed).
void log_pager_errors(bool on);

}  // namespace epq
