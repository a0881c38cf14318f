#include "engine/llama_log.h"

#include "backend/pager_device.h"
#include "llama.h"

#include <cstdio>

namespace epq {

namespace {

// A message and its CONT lines come from one thread; several threads log at once (ggml's repack
// from the read threads, llama.cpp from the main one).
thread_local ggml_log_level g_last_level = GGML_LOG_LEVEL_NONE;

void quiet_logger(ggml_log_level level, const char * text, void *) {
    // CONT lines continue the previous message at its level.
    if (level == GGML_LOG_LEVEL_CONT) {
        level = g_last_level;
    } else {
        g_last_level = level;
    }
    // When the pager failed, its own message says why; llama.cpp's follow-up errors only repeat it.
    if (level == GGML_LOG_LEVEL_ERROR && pager_last_error().empty()) {
        std::fprintf(stderr, "llama.cpp: %s", text);
    }
}

void verbose_logger(ggml_log_level, const char * text, void *) {
    std::fputs(text, stderr);
}

}  // namespace

void set_llama_verbosity(bool verbose) {
    llama_log_set(verbose ? verbose_logger : quiet_logger, nullptr);
}

}  // namespace epq
