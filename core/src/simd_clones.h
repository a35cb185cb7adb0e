#pragma once

// Function multiversioning for ft's hand-written element loops: GCC compiles
// the body once for AVX-512 (x86-64-v4), once for AVX2 (v3) and once for the
// baseline the library is built for, and the loader picks the best the CPU
// has. The library itself stays baseline x86-64, so it runs anywhere; the
// loops still get the wide registers where they exist.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FT_SIMD_CLONES
#endif
