# Fetches the pinned llama.cpp release (see llama_pin.cmake) into the build tree and adds
# ggml + libllama as static subprojects. Every step leaves a stamp so a re-configure or an
# incremental build never repeats the download or the clone.
include(${CMAKE_CURRENT_LIST_DIR}/llama_pin.cmake)

set(EPQ_DEPS_DIR "${CMAKE_BINARY_DIR}/_deps")
set(EPQ_LLAMA_TARBALL "" CACHE FILEPATH
    "Use this local ${EPQ_LLAMA_NPM_PACKAGE}-${EPQ_LLAMA_NPM_VERSION}.tgz instead of running npm pack")
set(_tgz "${EPQ_DEPS_DIR}/${EPQ_LLAMA_NPM_PACKAGE}-${EPQ_LLAMA_NPM_VERSION}.tgz")
set(_src "${EPQ_DEPS_DIR}/llama.cpp")
set(_stamp "${_src}/.epq-${EPQ_LLAMA_NPM_VERSION}-${EPQ_LLAMA_NPM_SHA256}")

if(NOT EXISTS "${_stamp}")
  file(MAKE_DIRECTORY "${EPQ_DEPS_DIR}")
  if(EPQ_LLAMA_TARBALL)
    file(COPY_FILE "${EPQ_LLAMA_TARBALL}" "${_tgz}")
  elseif(NOT EXISTS "${_tgz}")
    find_program(EPQ_NPM npm)
    if(NOT EPQ_NPM)
      message(FATAL_ERROR "npm not found: it is needed to fetch llama.cpp "
                          "(${EPQ_LLAMA_NPM_PACKAGE}@${EPQ_LLAMA_NPM_VERSION}). "
                          "Install it with: apt-get install -y npm")
    endif()
    message(STATUS "epq: fetching ${EPQ_LLAMA_NPM_PACKAGE}@${EPQ_LLAMA_NPM_VERSION} with npm pack")
    execute_process(
      COMMAND "${EPQ_NPM}" pack "${EPQ_LLAMA_NPM_PACKAGE}@${EPQ_LLAMA_NPM_VERSION}"
              --pack-destination "${EPQ_DEPS_DIR}" --silent
      RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
    if(NOT _rc EQUAL 0 OR NOT EXISTS "${_tgz}")
      message(FATAL_ERROR "epq: npm pack ${EPQ_LLAMA_NPM_PACKAGE}@${EPQ_LLAMA_NPM_VERSION} failed "
                          "(${_rc}): ${_err}\nCheck that the npm registry is reachable, or pass "
                          "-DEPQ_LLAMA_TARBALL=/path/to/${EPQ_LLAMA_NPM_PACKAGE}-${EPQ_LLAMA_NPM_VERSION}.tgz")
    endif()
  endif()

  file(SHA256 "${_tgz}" _sha)
  if(NOT _sha STREQUAL EPQ_LLAMA_NPM_SHA256)
    file(REMOVE "${_tgz}")
    message(FATAL_ERROR "epq: ${_tgz} has SHA-256 ${_sha}, expected ${EPQ_LLAMA_NPM_SHA256}. "
                        "The package is not the pinned one; refusing to build from it.")
  endif()

  set(_unpack "${EPQ_DEPS_DIR}/npm-unpack")
  file(REMOVE_RECURSE "${_unpack}" "${_src}")
  file(ARCHIVE_EXTRACT INPUT "${_tgz}" DESTINATION "${_unpack}"
       PATTERNS package/llama/gitRelease.bundle package/llama/llama.cpp.info.json)
  file(READ "${_unpack}/package/llama/llama.cpp.info.json" _info)
  string(JSON _tag GET "${_info}" tag)
  if(NOT _tag STREQUAL EPQ_LLAMA_RELEASE_TAG)
    message(FATAL_ERROR "epq: the package ships llama.cpp ${_tag}, expected ${EPQ_LLAMA_RELEASE_TAG}")
  endif()

  find_package(Git REQUIRED)
  execute_process(
    COMMAND "${GIT_EXECUTABLE}" -c advice.detachedHead=false clone --quiet
            "${_unpack}/package/llama/gitRelease.bundle" "${_src}"
    RESULT_VARIABLE _rc ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "epq: cloning the llama.cpp bundle failed: ${_err}")
  endif()
  file(REMOVE_RECURSE "${_unpack}")
  file(TOUCH "${_stamp}")
  message(STATUS "epq: llama.cpp ${EPQ_LLAMA_RELEASE_TAG} checked out in ${_src}")
endif()

set(EPQ_LLAMA_SOURCE_DIR "${_src}" CACHE INTERNAL "pinned llama.cpp tree")

# The libraries epq links: ggml, libllama, the common library (argument parser, chat templates,
# sampling, JSON schema to grammar) and the server library (`server-context`, `llama-server-impl`,
# the web UI), plus stock `llama-server` itself, which the tests run beside `epq serve`. Every
# llama.cpp target is EXCLUDE_FROM_ALL: only what epq's targets depend on is built. No network
# (curl, OpenSSL) and no shared objects.
set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
set(GGML_NATIVE ON CACHE BOOL "" FORCE)
foreach(_opt LLAMA_BUILD_TESTS LLAMA_BUILD_EXAMPLES LLAMA_BUILD_APP LLAMA_OPENSSL LLAMA_CURL
             LLAMA_USE_PREBUILT_UI LLAMA_ALL_WARNINGS GGML_BUILD_TESTS GGML_BUILD_EXAMPLES)
  set(${_opt} OFF CACHE BOOL "" FORCE)
endforeach()
foreach(_opt LLAMA_BUILD_COMMON LLAMA_BUILD_TOOLS LLAMA_BUILD_SERVER)
  set(${_opt} ON CACHE BOOL "" FORCE)
endforeach()
# llama.cpp's web UI is a Svelte app: the build runs `npm ci` and `npm run build` in a copy of
# tools/ui (about a minute with npm's cache warm). Sanitizer builds test the server's API, not
# its page: they embed no UI (the server then answers / with a short notice).
if(EPQ_SANITIZE)
  set(LLAMA_BUILD_UI OFF CACHE BOOL "" FORCE)
else()
  set(LLAMA_BUILD_UI ON CACHE BOOL "" FORCE)
endif()
# A TSan build instruments ggml's CPU backend too, whose worker threads run the expert matmuls
# beside the pager's read, populate and prefetch threads, with ggml's own thread pool: the
# OpenMP runtime is not instrumented and would report races it does not have. libllama and
# ggml-base run on the thread that calls them and are not instrumented: libllama is built as in
# every other build, so ccache serves it from the regular build (ggml-base compiles once more,
# without OpenMP).
if("thread" IN_LIST EPQ_SANITIZE)
  set(GGML_OPENMP OFF CACHE BOOL "" FORCE)
endif()
# llama.cpp's Vulkan backend beside the CPU (scripts/setup.sh --vulkan, which also finds a shader
# compiler and headers new enough for the pinned tree: scripts/vulkan-tools.sh). -ngl then puts
# layers on a GPU while every routed expert stays with the pager. Off by default: the shaders
# take minutes to compile and a machine without a GPU gains nothing.
# llama.cpp's RPC backend, in every build: `--rpc HOST:PORT` places layers (-ngl) on a remote
# ggml-rpc-server (built beside epq from the same tree), whose experts then stay there. It is one
# source file and registers no device until --rpc names a server.
set(GGML_RPC ON CACHE BOOL "" FORCE)
option(EPQ_VULKAN "Build llama.cpp's Vulkan backend (-ngl: layers on a GPU beside the pager)" OFF)
set(GGML_VULKAN ${EPQ_VULKAN} CACHE BOOL "" FORCE)
add_subdirectory("${_src}" "${CMAKE_BINARY_DIR}/llama.cpp" EXCLUDE_FROM_ALL SYSTEM)
if("thread" IN_LIST EPQ_SANITIZE)
  target_compile_options(ggml-cpu PRIVATE -fsanitize=thread)
  # Stock llama-server (which the tests run beside epq serve) and llama-gguf-split (which splits
  # the split-model tests' files) link that ggml-cpu too.
  target_link_options(llama-server PRIVATE -fsanitize=thread)
  target_link_options(llama-gguf-split PRIVATE -fsanitize=thread)
  # So does the RPC server the --rpc tests start.
  target_link_options(ggml-rpc-server PRIVATE -fsanitize=thread)
endif()

# epq's JSON and HTTP code uses the copies of nlohmann-json and cpp-httplib that the pinned tree
# vendors: the server library is linked into the same binary, and two versions of either would
# be two incompatible sets of types (cpp-httplib is compiled, so two copies would also clash).
add_library(epq_json INTERFACE)
target_link_libraries(epq_json INTERFACE vendor::nlohmann)
add_library(epq_httplib INTERFACE)
target_link_libraries(epq_httplib INTERFACE cpp-httplib)
target_include_directories(epq_httplib SYSTEM INTERFACE "${_src}/vendor")
