# Warnings and sanitizers for epq's own targets only (llama.cpp keeps its own flags).
set(EPQ_SANITIZE "" CACHE STRING "Sanitizers for epq's code: 'address;undefined' or 'thread'")

add_library(epq_flags INTERFACE)
target_compile_options(epq_flags INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                       -Wno-sign-conversion -Wno-missing-field-initializers)
if(EPQ_SANITIZE)
  string(REPLACE ";" "," _san "${EPQ_SANITIZE}")
  target_compile_options(epq_flags INTERFACE -fsanitize=${_san} -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined
                         # GCC's flow analysis under sanitizers reports false positives in
                         # libstdc++ (std::function inside std::regex).
                         -Wno-maybe-uninitialized
                         # -O1, as the sanitizers' own guides suggest: under ASan epq's largest
                         # files compiled in a third of their -O3 time (CI builds epq once per
                         # sanitizer), and the tests' time goes into llama.cpp's kernels, which
                         # keep their -O3.
                         -O1)
  target_link_options(epq_flags INTERFACE -fsanitize=${_san})
endif()
