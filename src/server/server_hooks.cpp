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

std::function<HttpHandler(const std::string &, const HttpHandler &)> & post_route() {
    static std::function<HttpHandler(const std::string &, const HttpHandler &)> fn;
    return fn;
}

}  // namespace

void set_post_route_hook(std::function<HttpHandler(const std::string & path, const HttpHandler &)> fn) {
    post_route() = std::move(fn);
}

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
// server_http_context::post(const std::string &, const handler_t &) const
void __real__ZNK19server_http_context4postERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt8functionIFSt10unique_ptrI15server_http_resSt14default_deleteISA_EERK15server_http_reqEE(
    const server_http_context * self, const std::string & path, const epq::server::HttpHandler & handler);

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

void __wrap__ZNK19server_http_context4postERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt8functionIFSt10unique_ptrI15server_http_resSt14default_deleteISA_EERK15server_http_reqEE(
    const server_http_context * self, const std::string & path, const epq::server::HttpHandler & handler) {
    const auto & fn = epq::server::post_route();
    __real__ZNK19server_http_context4postERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKSt8functionIFSt10unique_ptrI15server_http_resSt14default_deleteISA_EERK15server_http_reqEE(
        self, path, fn ? fn(path, handler) : handler);
}
}
