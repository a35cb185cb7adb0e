# FT_FUZZ=ON (included from the top-level CMakeLists.txt before any target):
# everything ft builds gets libFuzzer's coverage hooks plus ASan and UBSan;
# tests/fuzz/CMakeLists.txt links the fuzz targets with -fsanitize=fuzzer.
# LibTorch, yaml-cpp and the other system libraries stay uninstrumented.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "FT_FUZZ needs clang (libFuzzer ships with it): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++, or use scripts/fuzz.sh")
endif()
# -fno-sanitize-recover: a UBSan finding must crash, or libFuzzer keeps going past it.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=address,undefined)
