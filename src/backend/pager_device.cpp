#include "backend/pager_device.h"

#include "backend/expert_chain.h"
#include "backend/pager.h"

#include "ggml-backend-impl.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <sys/mman.h>

namespace epq {

namespace {

// The device's context: the pager it serves and the last error it hit. ggml's callbacks reach
// it through the handle they get (buffer -> buffer type -> device, backend -> device), and
// attach_pager is the only place that sets it.
struct DeviceState {
    Pager * pager = nullptr;
    // Written on the thread that computes, read by llama.cpp's log callback on any thread.
    std::mutex error_mu;
    std::string last_error;
};

DeviceState g_state;

DeviceState & state_of(ggml_backend_dev_t dev) {
    return *static_cast<DeviceState *>(dev->context);
}

Pager * pager_of(ggml_backend_dev_t dev) {
    return state_of(dev).pager;
}

std::atomic<bool> g_log_errors{false};

void set_last_error(ggml_backend_dev_t dev, std::string e) {
    if (g_log_errors && !e.empty()) {
        std::fprintf(stderr, "epq: pager: %s\n", e.c_str());
    }
    DeviceState & s = state_of(dev);
    std::lock_guard<std::mutex> lock(s.error_mu);
    s.last_error = std::move(e);
}

// ---- buffer: address space only ------------------------------------------------------------

struct ReservedRange {
    void * base = nullptr;
    size_t size = 0;
};

// Bytes of the buffers llama.cpp holds in this buffer type: the expert tensors it placed here.
std::atomic<uint64_t> g_buffer_bytes{0};

void buffer_free(ggml_backend_buffer_t buffer) {
    auto * r = static_cast<ReservedRange *>(buffer->context);
    g_buffer_bytes -= ggml_backend_buffer_get_size(buffer);
    if (r->base) {
        munmap(r->base, r->size);
    }
    delete r;
}

void * buffer_get_base(ggml_backend_buffer_t buffer) {
    return static_cast<ReservedRange *>(buffer->context)->base;
}

void buffer_memset_tensor(ggml_backend_buffer_t, ggml_tensor *, uint8_t, size_t, size_t) {}

// The loader hands over each expert tensor's bytes here; the pager reads them from the file
// when they are needed instead.
void buffer_set_tensor(ggml_backend_buffer_t, ggml_tensor *, const void *, size_t, size_t) {}

void buffer_get_tensor(ggml_backend_buffer_t buffer, const ggml_tensor * tensor, void * data, size_t offset,
                       size_t size) {
    Pager * pager = pager_of(buffer->buft->device);
    if (!pager) {
        GGML_ABORT("epq: expert tensor %s read with no pager attached", tensor->name);
    }
    pager->read_tensor(tensor, data, offset, size);
}

bool buffer_cpy_tensor(ggml_backend_buffer_t, const ggml_tensor *, ggml_tensor *) {
    return false;
}

void buffer_clear(ggml_backend_buffer_t, uint8_t) {}

const ggml_backend_buffer_i kBufferIface = {
    /* .free_buffer   = */ buffer_free,
    /* .get_base      = */ buffer_get_base,
    /* .init_tensor   = */ nullptr,
    /* .memset_tensor = */ buffer_memset_tensor,
    /* .set_tensor    = */ buffer_set_tensor,
    /* .get_tensor    = */ buffer_get_tensor,
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ buffer_cpy_tensor,
    /* .clear         = */ buffer_clear,
    /* .reset         = */ nullptr,
};

// ---- buffer type ---------------------------------------------------------------------------

const char * buft_get_name(ggml_backend_buffer_type_t) {
    return "EPQ_EXPERTS";
}

ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    auto * r = new ReservedRange;
    r->size = size > 0 ? size : 1;
    // Unique addresses for the tensors, never backed by memory.
    r->base = mmap(nullptr, r->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r->base == MAP_FAILED) {
        delete r;
        return nullptr;
    }
    g_buffer_bytes += size;
    return ggml_backend_buffer_init(buft, kBufferIface, r, size);
}

size_t buft_get_alignment(ggml_backend_buffer_type_t) {
    return 64;
}

bool buft_is_host(ggml_backend_buffer_type_t) {
    return false;
}

ggml_backend_buffer_type g_buft = {
    /* .iface = */ {
        /* .get_name       = */ buft_get_name,
        /* .alloc_buffer   = */ buft_alloc_buffer,
        /* .get_alignment  = */ buft_get_alignment,
        /* .get_max_size   = */ nullptr,
        /* .get_alloc_size = */ nullptr,
        /* .is_host        = */ buft_is_host,
    },
    /* .device  = */ nullptr,  // set at registration
    /* .context = */ nullptr,
};

bool in_pager_buffer(const ggml_tensor * t) {
    if (!t) {
        return false;
    }
    const ggml_tensor * base = t->view_src ? t->view_src : t;
    return base->buffer && base->buffer->buft == &g_buft;
}

// ---- backend (stream) ----------------------------------------------------------------------

const char * backend_get_name(ggml_backend_t) {
    return "EPQ";
}

void backend_free(ggml_backend_t backend) {
    delete backend;
}

ggml_status backend_graph_compute(ggml_backend_t backend, ggml_cgraph * cgraph) {
    Pager * pager = pager_of(backend->device);
    if (!pager) {
        set_last_error(backend->device, "expert matmul with no pager attached");
        return GGML_STATUS_FAILED;
    }
    try {
        pager->compute(cgraph);
    } catch (const std::exception & e) {
        set_last_error(backend->device, e.what());
        return GGML_STATUS_FAILED;
    }
    return GGML_STATUS_SUCCESS;
}

ggml_guid_t backend_guid() {
    static ggml_guid guid = {0x65, 0x70, 0x71, 0x2d, 0x70, 0x61, 0x67, 0x65,
                             0x72, 0x2d, 0x76, 0x31, 0x00, 0x00, 0x00, 0x01};
    return &guid;
}

const ggml_backend_i kBackendIface = {
    /* .get_name            = */ backend_get_name,
    /* .free                = */ backend_free,
    /* .set_tensor_async    = */ nullptr,
    /* .get_tensor_async    = */ nullptr,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ nullptr,
    /* .synchronize         = */ nullptr,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ backend_graph_compute,
    /* .event_record        = */ nullptr,
    /* .event_wait          = */ nullptr,
    /* .graph_optimize      = */ nullptr,
};

// ---- device --------------------------------------------------------------------------------

const char * dev_get_name(ggml_backend_dev_t) {
    return "EPQ";
}
const char * dev_get_description(ggml_backend_dev_t) {
    return "epq expert pager";
}
void dev_get_memory(ggml_backend_dev_t, size_t * free, size_t * total) {
    *free = 0;
    *total = 0;
}
enum ggml_backend_dev_type dev_get_type(ggml_backend_dev_t) {
    return GGML_BACKEND_DEVICE_TYPE_ACCEL;
}

void dev_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props * props) {
    props->name = dev_get_name(dev);
    props->description = dev_get_description(dev);
    props->memory_free = 0;
    props->memory_total = 0;
    props->type = GGML_BACKEND_DEVICE_TYPE_ACCEL;
    props->device_id = nullptr;
    props->caps = {/* async */ false, /* host_buffer */ false, /* buffer_from_host_ptr */ false,
                   /* events */ false, /* mmap_support */ true};
}

ggml_backend_t dev_init_backend(ggml_backend_dev_t dev, const char *) {
    return new ggml_backend{backend_guid(), kBackendIface, dev, nullptr};
}

// The CPU buffer type: llama.cpp then keeps every ordinary weight where it was.
ggml_backend_buffer_type_t dev_get_buffer_type(ggml_backend_dev_t) {
    return ggml_backend_cpu_buffer_type();
}

bool dev_supports_op(ggml_backend_dev_t dev, const ggml_tensor * op) {
    switch (op->op) {
        case GGML_OP_MUL_MAT_ID: {
            const Pager * pager = pager_of(dev);
            return in_pager_buffer(op->src[0]) && (!pager || pager->serves(op->src[0]));
        }
        case GGML_OP_GLU:
        case GGML_OP_UNARY:
        case GGML_OP_ADD_ID:
            // The activation (and biases) between a layer's expert matmuls: claiming them puts
            // gate, up, activation and down in one split, computed expert by expert.
            return is_expert_row_value(op, in_pager_buffer);
        case GGML_OP_NONE:
        case GGML_OP_VIEW:
        case GGML_OP_RESHAPE:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE:
            // The scheduler asks about the weight tensors themselves.
            return in_pager_buffer(op) || in_pager_buffer(op->src[0]);
        default: return false;
    }
}

bool dev_supports_buft(ggml_backend_dev_t, ggml_backend_buffer_type_t buft) {
    return buft == &g_buft || ggml_backend_buft_is_host(buft);
}

const ggml_backend_device_i kDeviceIface = {
    /* .get_name             = */ dev_get_name,
    /* .get_description      = */ dev_get_description,
    /* .get_memory           = */ dev_get_memory,
    /* .get_type             = */ dev_get_type,
    /* .get_props            = */ dev_get_props,
    /* .init_backend         = */ dev_init_backend,
    /* .get_buffer_type      = */ dev_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ dev_supports_op,
    /* .supports_buft        = */ dev_supports_buft,
    /* .offload_op           = */ nullptr,
    /* .event_new            = */ nullptr,
    /* .event_free           = */ nullptr,
    /* .event_synchronize    = */ nullptr,
};

// ---- registry ------------------------------------------------------------------------------

ggml_backend_device g_device = {kDeviceIface, nullptr, &g_state};

const char * reg_get_name(ggml_backend_reg_t) {
    return "EPQ";
}
size_t reg_get_device_count(ggml_backend_reg_t) {
    return 1;
}
ggml_backend_dev_t reg_get_device(ggml_backend_reg_t, size_t) {
    return &g_device;
}

// llama.cpp pushes the decode thread count through this on every decode.
void set_n_threads(ggml_backend_t backend, int n_threads) {
    if (Pager * pager = pager_of(backend->device)) {
        pager->set_n_threads(n_threads);
    }
}

void * reg_get_proc_address(ggml_backend_reg_t, const char * name) {
    if (std::string(name) == "ggml_backend_set_n_threads") {
        return reinterpret_cast<void *>(&set_n_threads);
    }
    return nullptr;
}

const ggml_backend_reg_i kRegIface = {
    /* .get_name         = */ reg_get_name,
    /* .get_device_count = */ reg_get_device_count,
    /* .get_device       = */ reg_get_device,
    /* .get_proc_address = */ reg_get_proc_address,
};

ggml_backend_reg g_reg = {GGML_BACKEND_API_VERSION, kRegIface, nullptr};

}  // namespace

void register_pager_device() {
    static std::once_flag once;
    std::call_once(once, [] {
        g_device.reg = &g_reg;
        g_buft.device = &g_device;
        ggml_backend_register(&g_reg);
    });
}

ggml_backend_buffer_type_t pager_buffer_type() {
    return &g_buft;
}

void check_attached_model_file() {
    if (Pager * pager = pager_of(&g_device)) {
        pager->check_model_file();
    }
}

void attach_pager(Pager * pager) {
    state_of(&g_device).pager = pager;
    set_last_error(&g_device, "");
}

void log_pager_errors(bool on) {
    g_log_errors = on;
}

std::string pager_last_error() {
    DeviceState & s = state_of(&g_device);
    std::lock_guard<std::mutex> lock(s.error_mu);
    return s.last_error;
}

uint64_t pager_buffer_bytes() {
    return g_buffer_bytes.load();
}

}  // namespace epq
