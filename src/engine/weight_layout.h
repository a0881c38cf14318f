// Which layout the weights are held in, and so which stock llama.cpp configuration a run's output
// is identical to. ggml's CPU backend repacks the matrices of some types into interleaved rows at
// load (stock's default; -nr turns it off). A repacked matrix is computed by another kernel whose
// sums round differently, so the layout decides the logits: a paged run must hold every weight as
// the stock configuration it is compared with does.
//
// Repacking an expert costs CPU after every read. When the arena holds every expert each is read
// and repacked once, and stock's default layout is free; when it holds part of them, experts are
// read again and again, and the repack competes with the compute threads (30B shape, 8 GiB, 2
// threads: decode 9.24 tok/s in the file's layout against 7.31 repacked). So by default the arena
// chooses. Within this tree stock has no flag that keeps experts in the file's layout while it
// repacks the dense matrices (`-ot exps=CPU` still picks the repack buffer for CPU weights), so
// the file's layout is stock's -nr for every weight: the one stock configuration it matches.
//
// Where ggml has a GPU device, llama.cpp chooses the GPU's host buffer type for the weights it
// keeps on the CPU (the routed experts with --cpu-moe, every weight of the layers -ngl leaves
// there), ahead of the repack buffer, and with mmap the plain CPU buffer in its place: stock's
// default flags then repack nothing, and its --no-host is the configuration that repacks. The
// layout follows: the file's by default, repacked (with --no-host for the dense weights) only
// when asked.
#pragma once

#include <string>

namespace epq {

enum class WeightLayout {
    automatic,  // repacked when the arena holds every expert, the file's otherwise
    repacked,   // --repack: stock's default flags
    file,       // -nr / --no-repack: stock -nr
};

// Whether llama.cpp holds CPU weights in a GPU's host buffer (a GPU device is visible): stock's
// default flags then keep every CPU weight in the file's layout.
bool gpu_host_buffer_first();

// Whether weights are held repacked for `layout`, given whether the arena holds every expert and
// whether a GPU's host buffer comes first (gpu_host_buffer_first()).
bool layout_repacks(WeightLayout layout, bool arena_holds_everything, bool gpu_host = false);

// The stock llama.cpp configuration a run in this layout is identical to, for messages. `remote`:
// some layers are on an RPC server (model_devices.h), where they keep their experts.
std::string stock_configuration(bool repack, bool gpu_host = false, bool remote = false);

// One line for the start of a run: the layout, why, and the stock configuration it matches.
std::string layout_line(WeightLayout asked, bool repack, bool gpu_host = false, bool remote = false,
                        const std::string & ready_file = "");

}  // namespace epq
