# The one place the llama.cpp dependency is pinned.
# llama.cpp comes as the git bundle that the npm package ships (llama/gitRelease.bundle);
# the package tarball is checked against this SHA-256 before anything in it is used.
set(EPQ_LLAMA_NPM_PACKAGE "node-llama-cpp")
set(EPQ_LLAMA_NPM_VERSION "3.22.1")
set(EPQ_LLAMA_NPM_SHA256 "a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f")
set(EPQ_LLAMA_RELEASE_TAG "v0.5.0")
