#include "server/server_hooks.h"

#include "server-context.h"
#include "server-http.h"

namespace epq::server {

namespace {

std::function<void(server_http_context &)> & before_listen() {
    static std::function<void(server_http_context &)> fn;
    return fn;
}

std::function<bool()> & after_load() {
    static std::function<bool()> fn;
    return fn;
}

}  // namespace

void set_before_listen_hook(std::function<void(server_http_context &)> fn) {
    before_listen() = std::move(fn);
}

void set_after_load_hook(std::function<bool()> fn) {
    after_load() = std::move(fn);
}

}  // namespace epq::server

// The Itanium C++ ABI passes `this` as the first argument of a member function, so a C function
// taking the object's pointer first has the same calling convention.
extern "C" {
bool __real__ZN19server_http_context5startEv(server_http_context * self);
bool __real__ZN14server_context10load_modelER13common_params(server_context * self, common_params & params);

bool __wrap__ZN19server_http_context5startEv(server_http_context * self) {
    if (const auto & fn = epq::server::before_listen()) {
        fn(*self);
    }
    return __real__ZN19server_http_context5startEv(self);
}

bool __wrap__ZN14server_context10load_modelER13common_params(server_context * self, common_params & params) {
    if (!__real__ZN14server_context10load_modelER13common_params(self, params)) {
        return false;
    }
    const auto & fn = epq::server::after_load();
    return !fn || fn();
}
}
