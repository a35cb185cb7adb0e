#!/usr/bin/env bash
# Builds ft against LibTorch 2.x: the LibTorch inside the PyPI torch wheel of
# .venv-hf (scripts/hf-env.sh), into build-torch2/, with the Debian C++
# libraries (Boost, fmt, yaml-cpp, gloo headers, ...) as scripts/setup.sh
# installs them. The wheel's LibTorch is CUDA-enabled, so ft's CUDA code
# paths (FT_WITH_CUDA, the c10d NCCL backend) compile; it links and runs on CPU.
#
#   scripts/build-torch2.sh              configure + build everything (tests too)
#   scripts/build-torch2.sh ft_runtime   configure + build only what `ft run` needs
#   scripts/build-torch2.sh --test       build everything, then run the test suite (ctest)
#   scripts/build-torch2.sh --configure  configure only (then: ninja -C build-torch2 <target>)
#   TORCH2_PYTHON=/path/python scripts/build-torch2.sh   another interpreter's torch
#
# Why a shim: the wheel's TorchConfig.cmake (Caffe2Config.cmake ->
# public/cuda.cmake) insists on a CUDA toolkit at configure time: it sets
# CAFFE2_USE_CUDA unconditionally, calls find_package(CUDA),
# enable_language(CUDA) and find_package(CUDAToolkit REQUIRED), and stops with
# "Your installed Caffe2 version uses CUDA but I cannot find the CUDA
# libraries" when nvcc is absent; no switch (USE_CUDA=0, CAFFE2_USE_CUDNN=OFF)
# skips that. ft compiles no CUDA code itself, so when no nvcc is found this
# script writes a minimal TorchConfig.cmake (build-torch2/torch-shim/) that
# names the wheel's headers and libraries directly (libtorch, libtorch_cpu,
# libc10, libtorch_cuda, libc10_cuda; the CUDA runtime and NCCL headers from
# the nvidia-* wheels beside it), and points Torch_DIR at it. With nvcc on
# PATH (a GPU machine with the toolkit) the wheel's own TorchConfig is used.
# FORCE_SHIM=1 uses the shim anyway.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
build="${BUILD_DIR:-$repo/build-torch2}"
py="${TORCH2_PYTHON:-$repo/.venv-hf/bin/python}"
# A bare name (python3) is looked up on PATH.
py="$(command -v "$py" || echo "$py")"
run_tests=0
configure_only=0
targets=()
for a in "$@"; do
  case "$a" in --test) run_tests=1 ;; --configure) configure_only=1 ;; *) targets+=("$a") ;; esac
done

[[ -x "$py" ]] || scripts/hf-env.sh
prefix="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
torch_dir="$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
torch_version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
site="$(dirname "$torch_dir")"
echo "build-torch2: LibTorch $torch_version from $torch_dir"

cmake_args=(-S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release)
if command -v nvcc >/dev/null && [[ "${FORCE_SHIM:-0}" != 1 ]]; then
  cmake_args+=(-DCMAKE_PREFIX_PATH="$prefix")
else
  shim="$build/torch-shim"
  mkdir -p "$shim"
  cuda_inc=""
  # The runtime headers come with the nvidia-* wheels, but not crt/host_config.h
  # (cuda_runtime.h includes it; it belongs to the nvcc package): triton's copy
  # of the CUDA headers, last on the path, supplies just that.
  for d in "$site"/nvidia/cu*/include "$site"/nvidia/cuda_runtime/include "$site"/nvidia/nccl/include \
           "$site"/triton/backends/nvidia/include; do
    if [[ -d "$d" ]]; then cuda_inc+="$d;"; fi
  done
  # A toolkit beside the wheel (a GPU machine) fills in whatever the wheels lack.
  if command -v nvcc >/dev/null; then cuda_inc+="$(dirname "$(command -v nvcc)")/../include;"; fi
  # The wheel's include directory also carries its own protobuf and oneDNN
  # headers (google/, dnnl*.h, oneapi/), which would shadow Debian's, the ones
  # ft's ONNX code and sgemm.cpp are linked against: torch 2.11's protobuf
  # headers fail to compile beside Debian's protobuf (seen on the GPU
  # machine). The shim names a copy of that directory, as links, without them.
  inc="$shim/include"
  rm -rf "$inc"; mkdir -p "$inc"
  for e in "$torch_dir"/include/*; do
    case "$(basename "$e")" in google|dnnl*|oneapi) ;; *) ln -s "$e" "$inc/" ;; esac
  done
  cat >"$shim/TorchConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION "$torch_version")
if(PACKAGE_FIND_VERSION AND PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
EOF
  cat >"$shim/TorchConfig.cmake" <<EOF
# Written by scripts/build-torch2.sh: the wheel's LibTorch without its CUDA
# toolkit check (see that script). Same variables as the real TorchConfig.
set(TORCH_INSTALL_PREFIX "$torch_dir")
set(TORCH_INCLUDE_DIRS "$inc;$torch_dir/include/torch/csrc/api/include")
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=1")
# One IMPORTED SHARED target per library: CMake then knows where each lives,
# so the build RPATH and, through INSTALL_RPATH_USE_LINK_PATH, the installed
# one (an SDK prefix, scripts/test-sdk.sh) name the wheel's lib directory.
foreach(lib torch torch_cpu c10 torch_cuda c10_cuda)
  find_library(FT_SHIM_\${lib} \${lib} PATHS "$torch_dir/lib" NO_DEFAULT_PATH REQUIRED)
  if(NOT TARGET torch_shim::\${lib})
    add_library(torch_shim::\${lib} SHARED IMPORTED)
    set_target_properties(torch_shim::\${lib} PROPERTIES IMPORTED_LOCATION "\${FT_SHIM_\${lib}}")
  endif()
endforeach()
if(NOT TARGET torch)
  add_library(torch INTERFACE IMPORTED)
  set_target_properties(torch PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "\${TORCH_INCLUDE_DIRS};${cuda_inc}"
    # As the wheel's targets: torch_cpu's and torch_cuda's definitions; C++20 (ATen.h requires it from 2.10 on).
    INTERFACE_COMPILE_DEFINITIONS "_GLIBCXX_USE_CXX11_ABI=1;USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC;USE_TENSORPIPE;USE_C10D_NCCL"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    # --no-as-needed: keep libtorch_cuda (its kernels register at load time) as the real config does.
    INTERFACE_LINK_LIBRARIES "-Wl,--no-as-needed;torch_shim::torch;torch_shim::torch_cpu;torch_shim::c10;torch_shim::torch_cuda;torch_shim::c10_cuda;-Wl,--as-needed")
endif()
set(TORCH_LIBRARIES torch)
set(TORCH_CUDA_LIBRARIES "\${FT_SHIM_torch_cuda};\${FT_SHIM_c10_cuda}")
set(TORCH_FOUND TRUE)
set(Torch_FOUND TRUE)
EOF
  cmake_args+=(-DTorch_DIR="$shim")
  echo "build-torch2: no nvcc: using $shim/TorchConfig.cmake (CPU link; CUDA paths compiled)"
fi

export CCACHE_BASEDIR="$repo"
cmake "${cmake_args[@]}" >/dev/null
if ((configure_only)); then echo "build-torch2: configured $build"; exit 0; fi
ninja -C "$build" -j "${FT_BUILD_JOBS:-$(nproc)}" "${targets[@]}"
echo "build-torch2: built $build/bin/ft against LibTorch $torch_version"
if ((run_tests)); then
  ctest --test-dir "$build" --output-on-failure -j "${FT_TEST_JOBS:-1}"
fi
